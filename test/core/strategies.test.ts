// The strategies' traits (native/strategy/strategy.h, the `strategies` binding) are what the
// rest of the router asks instead of strategy names: each must say what the strategy really
// does. Every trait is checked here against the behaviour of every strategy in the registry, so
// a strategy added with wrong traits fails here rather than being keyed, reported or scraped
// for wrongly.
import { afterEach, describe, expect, it } from 'vitest'
import { exactSeed } from '../../src/core/exact-seed.js'
import { textSpan } from '../../src/core/key/index.js'
import { LIMITS, STRATEGIES, type RoutingParams } from '../../src/core/options.js'
import { Router, type Lease } from '../../src/core/router.js'
import { decisionOf, STRATEGY_INFO, strategyInfo } from '../../src/core/strategies.js'
import { ids } from '../helpers/keys.js'

const routers: Router[] = []
function make(strategy: string, opts: RoutingParams & { vnodes?: number } = {}, n = 3): Router {
  const r = new Router({ strategy, instances: ids(n).map((id) => ({ id })), ...opts })
  routers.push(r)
  return r
}
afterEach(() => routers.splice(0).forEach((r) => r.close()))

/** A prompt of its own, long enough for many blocks. */
const prompt = (i: number, length = 3000) => `prompt ${i}: ${'words of its own text. '.repeat(Math.ceil(length / 22))}`.slice(0, length)

function pickAndRelease(r: Router, text: string, opts = {}): Lease {
  const l = r.pick(text, opts)
  l.release()
  return l
}

describe('the strategy table', () => {
  it('lists every strategy of the registry once, with every trait', () => {
    expect(STRATEGY_INFO.map((s) => s.name)).toEqual(STRATEGIES)
    expect(new Set(STRATEGIES).size).toBe(STRATEGIES.length)
    for (const s of STRATEGY_INFO) {
      expect(Object.keys(s).sort()).toEqual(['blocks', 'defaultThreshold', 'engineLoad', 'exactView', 'name', 'placement', 'targeted'])
      expect(strategyInfo(s.name)).toBe(s)
    }
    expect(() => strategyInfo('nope')).toThrow(/strategy must be one of/)
  })
})

for (const info of STRATEGY_INFO) {
  describe(`${info.name}'s traits`, () => {
    it(`targeted: ${info.targeted}: it ${info.targeted ? 'keeps a prompt on one instance, and overflows it when that one is full' : 'spreads one prompt and never overflows'}`, () => {
      const r = make(info.name, { concurrencyThreshold: 1 })
      const text = prompt(1)
      // A dozen picks of one prompt, each released: a strategy with a target of its own gives
      // the same instance every time (random and least-loaded ties vary: (1/3)^11 otherwise).
      const seen = new Set(Array.from({ length: 12 }, () => pickAndRelease(r, text).instance))
      expect(seen.size === 1).toBe(info.targeted)
      // Its target full (threshold 1, one request held there): the next pick goes elsewhere,
      // an overflow. A strategy without a target never calls a pick one (random honours no
      // threshold at all).
      const held = r.pick(text)
      const next = r.pick(text)
      if (info.targeted) expect(next.instance).not.toBe(held.instance)
      expect(next.overflow).toBe(info.targeted)
      expect(decisionOf(info.name, next.overflow)).toBe(info.targeted ? 'overflow' : info.name)
      held.release()
      next.release()
    })

    it(`blocks: ${info.blocks}: a pick ${info.blocks ? 'queues' : 'queues no'} prefill blocks, and the text ${info.blocks ? 'is' : 'is not'} read past the key`, () => {
      const r = make(info.name)
      const l = r.pick(prompt(2))
      const queued = r.instances().reduce((n, i) => n + i.queuedPrefillBlocks, 0)
      expect(queued > 0).toBe(info.blocks)
      l.firstToken()
      expect(r.instances().reduce((n, i) => n + i.queuedPrefillBlocks, 0)).toBe(0)
      l.release()
      expect(textSpan(1024, info.name, 8192)).toBe(info.blocks ? 8192 : 1024)
    })

    it(`blocks: ${info.blocks}: a chat's key ${info.blocks ? 'ends' : 'does not end'} at its anchor`, () => {
      // Two conversations with one opening (up to the first user message) and different later
      // turns, inside the key's 1,024 code points: a strategy that ends the key at the anchor
      // places both by the opening alone.
      const opening = `system: ${'be brief. '.repeat(40)} user: the question`
      const a = `${opening} assistant: one answer`
      const b = `${opening} assistant: another answer, longer than the first`
      let same = 0
      for (let i = 0; i < 16; i++) {
        const r = make(info.name, { prefixLength: 1024, placement: 'hash', vnodes: 64 }, 16)
        const x = `${i} ${a}`
        const y = `${i} ${b}`
        const anchor = opening.length + String(i).length + 1
        if (pickAndRelease(r, x, { anchor }).instance === pickAndRelease(r, y, { anchor }).instance) same++
      }
      // Without the anchor, 16 instances and different keys: all 16 pairs together by chance is
      // (1/16)^16; with it (and a target), every pair.
      expect(same === 16).toBe(info.blocks && info.targeted)
    })

    it(`defaultThreshold: ${info.defaultThreshold}: what a router of it uses when none is given`, () => {
      expect(make(info.name).params.concurrencyThreshold).toBe(info.defaultThreshold)
      expect([LIMITS.concurrencyThreshold.default, LIMITS.concurrencyThreshold.max]).toContain(info.defaultThreshold)
    })

    it(`engineLoad: ${info.engineLoad}: the engines' reported load ${info.engineLoad ? 'counts' : 'is not read'}`, () => {
      const r = make(info.name)
      const busy = r.instances()[0]!.id
      // Every client's requests at one instance, as its engine reports them: at the threshold.
      r.setEngineLoad(busy, info.defaultThreshold, 0)
      const picked = new Set(Array.from({ length: 30 }, (_, i) => pickAndRelease(r, prompt(100 + i, 200)).instance))
      // 30 prompts over 3 instances miss one by chance at (2/3)^30.
      expect(picked.has(busy)).toBe(!info.engineLoad)
    })

    it(`exactView: ${info.exactView}: an engine's reported blocks ${info.exactView ? 'draw' : 'do not draw'} the prompt`, () => {
      const seed = exactSeed(undefined, undefined)
      const tokens = Uint32Array.from({ length: 512 }, (_, i) => 7_000_000 + i)
      const text = Array.from(tokens, (t) => t.toString(36)).join(' ')
      const r = make(info.name, { placement: 'hash' }, 4)
      const home = pickAndRelease(r, text).instance
      const holder = r.instances().find((i) => i.id !== home)!.id
      for (const i of r.instances()) r.exact.setView(i.id, 'fresh')
      const hashes = BigUint64Array.from({ length: tokens.length / 16 }, (_, i) => 99n * 4096n + BigInt(i))
      expect(r.exact.store(holder, null, hashes, tokens, 16, seed, 0)).toBe(tokens.length / 16)
      const withIds = pickAndRelease(r, text, { tokens: { ids: tokens, seed }, now: 0 })
      if (info.targeted) expect(withIds.instance === holder).toBe(info.exactView)
      else expect(info.exactView).toBe(false)
    })

    it(`placement: ${info.placement}: hash and balanced placement ${info.placement ? 'differ' : 'route alike'}`, () => {
      // The home's queue busy with one long prompt held: balanced placement weighs the queue
      // and sends new prompts homed there elsewhere; hash placement keeps them home.
      const differs = (() => {
        if (!info.targeted) return false
        const hash = make(info.name, { placement: 'hash' })
        const balanced = make(info.name, { placement: 'balanced' })
        const hh = hash.pick(prompt(3, 60_000))
        const bh = balanced.pick(prompt(3, 60_000))
        let n = 0
        for (let i = 0; i < 30; i++) if (pickAndRelease(hash, prompt(300 + i, 200)).instance !== pickAndRelease(balanced, prompt(300 + i, 200)).instance) n++
        hh.release()
        bh.release()
        return n > 0
      })()
      expect(differs).toBe(info.placement)
    })
  })
}
