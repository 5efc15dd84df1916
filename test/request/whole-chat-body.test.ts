// openAIBodyOf, which parses a small OpenAI body read whole, against readOpenAIBody, which
// reads one chunk by chunk under the shape limits: the same key, the same parse and the same
// refusal for any body, however it arrived.
import fc from 'fast-check'
import { afterAll, describe, expect, it } from 'vitest'
import { RequestError } from '../../src/core/errors.js'
import { textSpan } from '../../src/core/key/index.js'
import type { OpenAIApi } from '../../src/core/key/openai-key.js'
import { OFFLOAD_BYTES, offloads, openAIBodyOf, readOpenAIBody, WHOLE_BODY_BYTES, type OpenAIBody, type OpenAIBodyLimits } from '../../src/request/openai-body.js'
import { JsonShape } from '../../src/request/json-shape.js'
import { closeParsePool } from '../../src/request/parse-pool.js'
import { openAIBodies } from '../helpers/openai-bodies.js'

afterAll(() => closeParsePool())

async function* pieces(raw: Buffer, cuts: readonly number[]): AsyncIterable<Buffer> {
  let at = 0
  for (const c of cuts) {
    const to = Math.min(raw.length, at + 1 + (c % 64))
    if (to > at) yield raw.subarray(at, to)
    at = to
  }
  if (at < raw.length) yield raw.subarray(at)
}

/**
 * What a parse came to, in plain values that toStrictEqual compares. Whether the key carries
 * its hashes is left out: a body the chunked read sends to a worker comes back without them,
 * and its pick hashes the same text.
 */
function settled(b: OpenAIBody): unknown {
  if (b.native) {
    const k = b.native.key
    return { native: { text: Buffer.from(k).toString('hex'), keyBytes: k.keyBytes, anchorBytes: k.anchorBytes, model: b.native.model, promptCacheKey: b.native.promptCacheKey, stream: b.native.stream } }
  }
  return { request: b.request }
}

const refused = (err: unknown) => {
  if (!(err instanceof RequestError)) throw err
  return { refused: { status: err.status, code: err.code, message: err.message } }
}

async function both(api: OpenAIApi, raw: Buffer, limits: OpenAIBodyLimits, cuts: readonly number[]): Promise<[unknown, unknown]> {
  const whole = await Promise.resolve()
    .then(() => openAIBodyOf(api, raw, limits))
    .then(settled, refused)
  const chunked = await readOpenAIBody(api, pieces(raw, cuts), limits).then(settled, refused)
  return [whole, chunked]
}

const limitsFor = (prefixLength: number | undefined, span: number, hashed: boolean): OpenAIBodyLimits => ({
  maxBytes: 1 << 20,
  maxDepth: 16,
  span,
  prefixLength,
  hash: hashed ? { tenant: undefined, blockBytes: 0 } : undefined,
})

describe('a small OpenAI body read whole', () => {
  it('parses to the same key, request or refusal as one read in chunks, on the native and TypeScript paths', async () => {
    await fc.assert(
      fc.asyncProperty(openAIBodies, fc.constantFrom(1, 16, 4096), fc.constantFrom(undefined, 64), fc.boolean(), fc.array(fc.nat(), { maxLength: 6 }), async ([api, raw], span, prefixLength, hashed, cuts) => {
        const [whole, chunked] = await both(api, raw, limitsFor(prefixLength, span, hashed), cuts)
        expect(whole).toStrictEqual(chunked)
      }),
      { numRuns: 400 },
    )
  })

  const chat = (extra: string) => Buffer.from(`{"model":"m","messages":[{"role":"user","content":"a prompt"}]${extra}}`)
  const nested = (depth: number) => '['.repeat(depth) + ']'.repeat(depth)
  const cases: Record<string, Buffer> = {
    'nested one level past the limit, valid': chat(`,"x":${nested(16)}`),
    'nested past the limit and cut short': Buffer.from(`{"messages":[{"role":"user","content":"a"}],"x":${'['.repeat(40)}`),
    'nested to the limit': chat(`,"x":${nested(14)}`),
    'messages not an array': Buffer.from('{"model":"m","messages":"no"}'),
    'with 9,000 containers, valid': chat(`,"x":[${'[],'.repeat(9000)}[]]`),
    'with 9,000 containers, an invalid message': Buffer.from(`{"messages":[{"role":"user","content":7}],"x":[${'{},'.repeat(9000)}{}]}`),
    'not JSON': Buffer.from('{"messages":'),
  }
  for (const [name, raw] of Object.entries(cases)) {
    it(`${name}: the same outcome as read in chunks`, async () => {
      expect(raw.length).toBeLessThanOrEqual(WHOLE_BODY_BYTES)
      for (const prefixLength of [undefined, 64]) {
        const [whole, chunked] = await both('chat', raw, limitsFor(prefixLength, textSpan(64, 'prefix_aware', 0), true), [7, 300, 5])
        expect(whole).toStrictEqual(chunked)
      }
    })
  }

  it('sends a body the native scan declines, with as many containers as offload one, to a worker', async () => {
    const raw = cases['with 9,000 containers, an invalid message']!
    const shape = new JsonShape(16)
    shape.feed(raw)
    expect(offloads(raw.length, shape.containers)).toBe(true)
    expect(raw.length).toBeLessThan(OFFLOAD_BYTES)
    // The worker's refusal comes through a promise; one parsed here would throw at once.
    const r = openAIBodyOf('chat', raw, limitsFor(64, 64, true))
    expect(r).toBeInstanceOf(Promise)
    expect(await (r as Promise<OpenAIBody>).then(settled, refused)).toMatchObject({ refused: { status: 400 } })
  })
})
