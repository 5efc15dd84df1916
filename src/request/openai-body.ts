// An OpenAI request body, read under the body limits and parsed for routing where it costs
// the event loop least: small ordinary bodies here, large or container-heavy ones in a
// worker (parse-pool.ts). Chat and completions bodies are read by the native extraction
// (native-key.ts) when the caller gives a prefixLength; openAIRequest reads the rest and
// every body the native side declines, so errors and odd shapes come out exactly as before.
// The raw bytes are kept as they came, for the upstream request.
import { nativeApis, nativeRequest, type KeyHashing } from '../core/key/native-key.js'
import { openAIRequest, type OpenAIApi } from '../core/key/openai-key.js'
import { readBody } from './read-body.js'
import { JsonShape } from './json-shape.js'
import { parsePool, type ParsedBody } from './parse-pool.js'

// At either, a parse here stalls every other request for over half a millisecond (measured:
// a 256 KiB chat body 0.6 ms, 8192 one-element arrays 0.7 ms), while the hop to a worker
// adds under 0.1 ms to the request's own latency; below them the hop is the larger cost.
// The native scan reads prompt text at gigabytes a second but arrays, objects and numbers
// ten times slower (256 KiB of empty arrays: 0.7 ms), so the same limits hold for it.
export const OFFLOAD_BYTES = 256 * 1024
export const OFFLOAD_CONTAINERS = 8192

export interface OpenAIBodyLimits {
  maxBytes: number
  maxDepth: number
  /** Code points of routing text wanted (openAIRequest's limit). */
  span: number
  /** The router's prefixLength: given, chat and completions bodies are read natively. */
  prefixLength?: number | undefined
  /** For a body read natively on this thread: hash the key for the pick during the scan. */
  hash?: KeyHashing | undefined
}

export type OpenAIBody = ParsedBody & { raw: Buffer }

export const offloads = (size: number, containers: number) => size >= OFFLOAD_BYTES || containers >= OFFLOAD_CONTAINERS

export async function readOpenAIBody(api: OpenAIApi, chunks: AsyncIterable<Buffer>, limits: OpenAIBodyLimits): Promise<OpenAIBody> {
  const shape = new JsonShape(limits.maxDepth)
  let away = false
  // A body bound for a worker is gathered into shared memory, so handing it over copies nothing.
  const raw = await readBody(chunks, limits.maxBytes, (c) => shape.feed(c), (size) => {
    away = offloads(size, shape.containers)
    return away ? Buffer.from(new SharedArrayBuffer(size)) : Buffer.allocUnsafe(size)
  })
  // Parsed here as a body read whole is (the shape, already within its limits, is only scanned
  // again for a body the native scan declines).
  if (!away) return openAIBodyOf(api, raw, limits)
  const { span, prefixLength, maxDepth } = limits
  if (prefixLength === undefined || !nativeApis.includes(api)) return { raw, request: await parsePool().parse(api, raw, span) }
  // A worker's key crosses threads as a copy of its text, without hashes: not asked for there.
  return { raw, ...(await parsePool().parseKey(api, raw, { span, prefixLength, maxDepth })) }
}

/**
 * A small body read whole (under WHOLE_BODY_BYTES), parsed for routing as readOpenAIBody
 * parses one it reads in chunks: with the same results and errors, and without the shape
 * scan or a copy when the native extraction takes it, which is the usual case. Scanning
 * so few bytes natively costs the event loop little whatever they hold (64 KiB of empty
 * arrays, the slowest, about 0.2 ms), so only a body it declines is measured for a worker.
 */
export function openAIBodyOf(api: OpenAIApi, raw: Buffer, limits: OpenAIBodyLimits): OpenAIBody | Promise<OpenAIBody> {
  const { span, prefixLength } = limits
  if (prefixLength !== undefined && nativeApis.includes(api)) {
    const r = nativeRequest(api, raw, { span, prefixLength, maxDepth: limits.maxDepth, hash: limits.hash })
    if (r.status === 'ok') return { raw, native: r.request }
  }
  // Throws json_too_deep as the chunked read would have.
  const shape = new JsonShape(limits.maxDepth)
  shape.feed(raw)
  if (!offloads(raw.length, shape.containers)) return { raw, request: openAIRequest(api, raw, span) }
  return parsePool()
    .parse(api, raw, span)
    .then((request) => ({ raw, request }))
}

/** Bodies up to this long are read whole (readWhole) and given to openAIBodyOf: below OFFLOAD_BYTES, so never gathered for a worker. */
export const WHOLE_BODY_BYTES = 64 * 1024
