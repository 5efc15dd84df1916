// POST /v1/embeddings on a live worker, as vLLM answers it for a pooling model: one vector
// per input, as floats or (encoding_format "base64", the openai SDK's default) as base64 of
// little-endian float32s. The vectors are a fixed function of the text, so a test can tell
// inputs apart; they go through no engine (pooling has no decode, and no cache to model).
import { createHash } from 'node:crypto'
import type { ModelRegistry } from './models.js'
import { ApiError } from './openai-shapes.js'
import { tokenCount } from './tokenizer.js'

const DIMENSIONS = 8

function vector(text: string): Float32Array {
  const digest = createHash('sha256').update(text).digest()
  return Float32Array.from({ length: DIMENSIONS }, (_, i) => digest[i]! / 255)
}

function inputs(input: unknown): string[] {
  if (typeof input === 'string') return [input]
  if (Array.isArray(input) && input.length > 0) {
    if (input.every((x) => typeof x === 'string')) return input as string[]
    if (input.every((x) => Number.isInteger(x))) return [(input as number[]).join(' ')]
    if (input.every((x) => Array.isArray(x))) return (input as number[][]).map((ids) => ids.join(' '))
  }
  throw new ApiError(400, 'input must be a string, a list of strings, or token ids', 'BadRequestError', 'input')
}

export function embeddingsAnswer(body: unknown, models: ModelRegistry): object {
  if (body === null || typeof body !== 'object' || Array.isArray(body)) throw new ApiError(400, 'The request body must be a JSON object.')
  const b = body as Record<string, unknown>
  const model = models.resolve(typeof b.model === 'string' ? b.model : undefined)
  const base64 = b.encoding_format === 'base64'
  const texts = inputs(b.input)
  const data = texts.map((t, index) => {
    const v = vector(t)
    return { object: 'embedding', index, embedding: base64 ? Buffer.from(v.buffer).toString('base64') : Array.from(v) }
  })
  const tokens = texts.reduce((n, t) => n + tokenCount(Buffer.byteLength(t)), 0)
  return { id: `embd-${crypto.randomUUID().replace(/-/g, '')}`, object: 'list', created: Math.floor(Date.now() / 1000), model, data, usage: { prompt_tokens: tokens, total_tokens: tokens } }
}
