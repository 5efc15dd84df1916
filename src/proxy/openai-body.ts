// An OpenAI request body, read under the body limits and parsed for routing where it costs
// the event loop least: small ordinary bodies here, large or container-heavy ones in a
// worker (parse-pool.ts). The raw bytes are kept as they came, for the upstream request.
import { openAIRequest, type OpenAIApi, type OpenAIRequest } from '../core/key/openai-key.js'
import { readBody } from './body.js'
import { JsonShape } from './json-shape.js'
import { parsePool } from './parse-pool.js'

// At either, a parse here stalls every other request for over half a millisecond (measured:
// a 256 KiB chat body 0.6 ms, 8192 one-element arrays 0.7 ms), while the hop to a worker
// adds under 0.1 ms to the request's own latency; below them the hop is the larger cost.
export const OFFLOAD_BYTES = 256 * 1024
export const OFFLOAD_CONTAINERS = 8192

export interface OpenAIBodyLimits {
  maxBytes: number
  maxDepth: number
  /** Code points of routing text wanted (openAIRequest's limit). */
  span: number
}

export interface OpenAIBody {
  raw: Buffer
  request: OpenAIRequest
}

export const offloads = (size: number, containers: number) => size >= OFFLOAD_BYTES || containers >= OFFLOAD_CONTAINERS

export async function readOpenAIBody(api: OpenAIApi, chunks: AsyncIterable<Buffer>, limits: OpenAIBodyLimits): Promise<OpenAIBody> {
  const shape = new JsonShape(limits.maxDepth)
  let away = false
  // A body bound for a worker is gathered into shared memory, so handing it over copies nothing.
  const raw = await readBody(chunks, limits.maxBytes, (c) => shape.feed(c), (size) => {
    away = offloads(size, shape.containers)
    return away ? Buffer.from(new SharedArrayBuffer(size)) : Buffer.allocUnsafe(size)
  })
  const request = away ? await parsePool().parse(api, raw, limits.span) : openAIRequest(api, raw, limits.span)
  return { raw, request }
}
