// The peers' disaggregated routers choose as their sources say, on small crafted cases.
import { describe, expect, it } from 'vitest'
import { DynamoPd, islBoundingBypass } from '../../src/replay/peers/dynamo-pd.js'
import { LLMD_NON_CACHED_TOKENS, LlmdPd, llmdInputTokens } from '../../src/replay/peers/llmd-pd.js'
import { SglangPd } from '../../src/replay/peers/sglang-pd.js'
import { consistentHashKey, VllmPd } from '../../src/replay/peers/vllm-pd.js'
import { prepareRequest, type PreparedRequest } from '../../src/replay/prepare.js'
import { resolveSim } from '../../src/sim/config.js'
import type { TimedRequest } from '../../src/replay/types.js'
import { VirtualFleet } from '../../src/sim/virtual-fleet.js'

const sim = resolveSim({ profile: 'tiny' })
const prep = { model: sim.model, blockSize: sim.engine.blockSize, tokenizer: sim.tokenizer, withTokens: true }
let n = 0
const chat = (content: string, extra: Record<string, unknown> = {}): PreparedRequest =>
  prepareRequest({ at: 0, api: 'chat', body: { model: 'm', messages: [{ role: 'user', content }], max_tokens: 8, ...extra } } as TimedRequest, n++, prep)
const words = (seed: string, chars: number): string => `${seed} `.repeat(Math.ceil(chars / (seed.length + 1))).slice(0, chars)
const engines = Array.from({ length: 4 }, () => ({ numWaiting: 0, cache: { usage: 0 } }))
const ids = ['sim-0', 'sim-1', 'sim-2', 'sim-3']

describe('vLLM router PD (consistent_hash on both legs)', () => {
  it('keys by the body fields the policy reads, else the whole body; every request runs both legs over its own pool', () => {
    expect(consistentHashKey({ user: 'u1', messages: [] })).toBe('u1')
    expect(consistentHashKey({ session_params: { session_id: 's9' }, user: 'u1' })).toBe('s9')
    expect(consistentHashKey({ user_id: 'x' })).toBe('x')
    expect(consistentHashKey({ messages: [1] })).toBe('{"messages":[1]}')
    const r = new VllmPd({ ids, prefill: [0, 1], decode: [2, 3] })
    const seen = new Set<string>()
    for (let i = 0; i < 40; i++) {
      const a = r.route(chat(`question ${i}`))
      expect(a.flow).toBe('nixl')
      expect([0, 1]).toContain(a.prefill)
      expect([2, 3]).toContain(a.decode)
      seen.add(`${a.prefill}/${a.decode}`)
      // The same session goes to the same pair, whatever the text.
      const b = r.route(chat(`another ${i}`, { user: `user-${i}` }))
      const c = r.route(chat(`more ${i}`, { user: `user-${i}` }))
      expect([c.prefill, c.decode]).toEqual([b.prefill, b.decode])
    }
    // 160 virtual nodes a worker spread distinct bodies over every pair.
    expect(seen.size).toBe(4)
  })
})

describe('SGLang PD (cache_aware per pool, bootstrap flow)', () => {
  it('picks each leg by its own cache_aware tree, holds both loads until the request ends', () => {
    const r = new SglangPd({ prefill: [0, 1], decode: [2, 3] })
    const doc = words('alpha', 2000)
    const a = r.route(chat(doc), 0)
    expect(a.flow).toBe('bootstrap')
    expect(a.prefill).not.toBeNull()
    expect(r.prefillPolicy.loadOf(a.prefill!)).toBe(1)
    expect(r.decodePolicy.loadOf(a.decode)).toBe(1)
    // Another document goes to the other (smaller) tree of each pool; the first one returns home.
    const b = r.route(chat(words('omega', 2000)), 1)
    expect(b.prefill).not.toBe(a.prefill)
    expect(b.decode).not.toBe(a.decode)
    const c = r.route(chat(`${doc} and one more question`), 2)
    expect([c.prefill, c.decode]).toEqual([a.prefill, a.decode])
    a.finish()
    a.finish()
    expect(r.prefillPolicy.loadOf(a.prefill!)).toBe(1) // c's
    expect(r.decodePolicy.loadOf(a.decode)).toBe(1)
  })
})

describe('llm-d PD (disagg-profile-handler, prefix-based-pd-decider)', () => {
  it('decides as prefix_based_pd_decider.go', () => {
    const r = new LlmdPd({ prefill: [0, 1], decode: [2, 3], engines, model: 'm', seed: 1 })
    expect(LLMD_NON_CACHED_TOKENS).toBe(16)
    expect(r.decide(15, 0)).toBe(false) // input shorter than nonCachedTokens
    expect(r.decide(100, 6)).toBe(false) // 6 blocks of 16 cached: 4 tokens left, under 16
    expect(r.decide(100, 5)).toBe(true) // 20 uncached tokens
    expect(new LlmdPd({ prefill: [0, 1], decode: [2, 3], engines, model: 'm', seed: 1 }, 0).decide(1, 0)).toBe(true)
    expect(llmdInputTokens({ api: 'completions', body: { prompt: 'x'.repeat(41) } })).toBe(10)
    expect(llmdInputTokens({ api: 'chat', body: { messages: [{ role: 'user', content: 'hi' }] } })).toBe(Math.floor('[{"role":"user","content":"hi"}]'.length / 4))
  })

  it('runs the decode profile first and the prefill profile only when the decode pod lacks enough of the prompt', () => {
    const r = new LlmdPd({ prefill: [0, 1], decode: [2, 3], engines, model: 'm', seed: 1 })
    const doc = words('gamma', 4000)
    const first = r.route(chat(doc), 0)
    expect([2, 3]).toContain(first.decode)
    expect([0, 1]).toContain(first.prefill)
    // The same prompt again: the prefix scorer (weight 2) sends it to the same decode pod, which
    // the plugin now credits with every block: decode-only.
    const again = r.route(chat(doc), 1)
    expect(again.decode).toBe(first.decode)
    expect(again.prefill).toBeNull()
  })
})

describe('Dynamo conditional disaggregation (isl_bounding)', () => {
  it("bypasses remote prefill as IslBoundingPolicy's tests say", () => {
    expect(islBoundingBypass(1000, 14, 64)).toBe(true) // eff 104, ratio 0.104
    expect(islBoundingBypass(100_000, 1000, 64)).toBe(false) // eff 36,000 ≥ 2,048
    expect(islBoundingBypass(200, 0, 64)).toBe(false) // ratio 1 ≥ 0.7
    expect(islBoundingBypass(2048, 0, 64)).toBe(false) // eff = threshold
    expect(islBoundingBypass(500, 10, 64)).toBe(true) // overlap past the prompt: eff 0
  })

  it('peeks the decode router, then runs the request whole there or splits it by the policy', () => {
    const r = new DynamoPd({ prefill: [0, 1], decode: [2, 3], engines, model: sim.model, seed: 1, blockSize: sim.engine.blockSize })
    const req = chat(words('delta', 3000))
    // Nothing indexed: eff_isl is the whole prompt, ratio 1: split.
    const a = r.route(req)
    expect(a.prefill).not.toBeNull()
    expect([2, 3]).toContain(a.decode)
    // The decode worker computes the prompt and reports its blocks in its KV events.
    const fleet = new VirtualFleet({ profile: 'tiny', instances: 4, kvEvents: true })
    fleet.engines[a.decode]!.setKvEventListener((events) => r.kvEvents(a.decode, events))
    fleet.submit(a.decode, { prepared: req.prompt, maxTokens: 2 })
    fleet.run()
    a.finish()
    const b = r.route(req)
    expect(b.decode).toBe(a.decode)
    expect(b.prefill).toBeNull()
    b.finish()
  })
})
