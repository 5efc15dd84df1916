// The exact view: what each instance's engine reports holding (its KV events), applied with
// router.exact.store/remove/clear, and used by longest_prefix for instances whose view is
// fresh when a pick brings the prompt's token ids.
import fc from 'fast-check'
import { afterEach, describe, expect, it } from 'vitest'
import { exactSeed } from '../../src/core/exact-seed.js'
import { xxh3Blocks } from '../../src/core/hash.js'
import type { RouterOptions } from '../../src/core/options.js'
import { EXACT_BLOCK_SIZE, EXACT_CAPACITY, EXACT_NOT_MEMBER, EXACT_ORPHAN, Router, type SharedRouterOptions } from '../../src/core/router.js'
import { ids } from '../helpers/keys.js'

const routers: Router[] = []
function make(opts: Partial<SharedRouterOptions> = {}): Router {
  const r = new Router({ strategy: 'longest_prefix', prefixLength: 65536, instances: ids(4).map((id) => ({ id })), ...opts })
  routers.push(r)
  return r
}
afterEach(() => routers.splice(0).forEach((r) => r.close()))

const SEED = exactSeed(undefined, undefined)

/** Token ids of a prompt: `shared` ids common to every prompt of `family`, then its own. */
function promptTokens(family: number, own: number, shared: number, total: number): Uint32Array {
  const t = new Uint32Array(total)
  for (let i = 0; i < total; i++) t[i] = i < shared ? family * 1_000_000 + i : family * 1_000_000 + own * 10_000 + i + 500_000
  return t
}
/** The text the same prompt is routed by (the approximate view's key): its ids, spelled out. */
const promptText = (t: Uint32Array) => Array.from(t, (x) => x.toString(36)).join(' ')

/** Engine hashes: any distinct 64-bit values (vLLM's own), here from the block's identity. */
const engineHashes = (base: number, n: number) => BigUint64Array.from({ length: n }, (_, i) => BigInt(base) * 4096n + BigInt(i))

function storeAll(r: Router, instance: string, tokens: Uint32Array, base: number, tier: 0 | 1 = 0, bs = 16): number {
  const n = Math.floor(tokens.length / bs)
  return r.exact.store(instance, null, engineHashes(base, n), tokens.subarray(0, n * bs), bs, SEED, tier)
}

describe('exact view API', () => {
  it('validates its arguments, naming the key and the range', () => {
    const r = make()
    const [a] = ids(1)
    const e = engineHashes(1, 2)
    const t = new Uint32Array(32)
    expect(() => r.exact.store(5 as unknown as string, null, e, t, 16, SEED, 0)).toThrow(/instance must be a string/)
    expect(() => r.exact.store(a!, -1n, e, t, 16, SEED, 0)).toThrow(/parent must be from 0n to 2n \*\* 64n - 1n; got -1/)
    expect(() => r.exact.store(a!, 1 as unknown as bigint, e, t, 16, SEED, 0)).toThrow(TypeError)
    expect(() => r.exact.store(a!, null, [1n] as unknown as BigUint64Array, t, 16, SEED, 0)).toThrow(/engineHashes must be a BigUint64Array/)
    expect(() => r.exact.store(a!, null, e, new Int32Array(32) as unknown as Uint32Array, 16, SEED, 0)).toThrow(/tokenIds must be a Uint32Array/)
    expect(() => r.exact.store(a!, null, e, new Uint32Array(31), 16, SEED, 0)).toThrow(/tokenIds must hold engineHashes.length × blockSize = 32 ids; got 31/)
    expect(() => r.exact.store(a!, null, e, t, 0, SEED, 0)).toThrow(/blockSize must be an integer from 1 to 1024; got 0/)
    expect(() => r.exact.store(a!, null, e, t, 1025, SEED, 0)).toThrow(RangeError)
    expect(() => r.exact.store(a!, null, e, t, 16, 2n ** 64n, 0)).toThrow(/seed must be from 0n/)
    expect(() => r.exact.store(a!, null, e, t, 16, SEED, 2 as 0)).toThrow(/tier must be 0 \(GPU\) or 1 \(offloaded\); got 2/)
    expect(() => r.exact.remove(a!, e, 3 as 0)).toThrow(/tier must be/)
    expect(() => r.exact.setView(a!, 'warm' as 'fresh')).toThrow(/view must be one of none, fresh, stale; got "warm"/)
    expect(() => r.exact.match(t, -1n)).toThrow(/seed must be/)
    expect(() => r.exact.match(t, SEED, Number.NaN)).toThrow(/now must be a finite number/)
    const text = 'x'.repeat(200)
    expect(() => r.pick(text, { tokens: { ids: [1, 2] as unknown as Uint32Array, seed: SEED } })).toThrow(/tokens.ids must be a Uint32Array/)
    expect(() => r.pick(text, { tokens: { ids: t, seed: -2n } })).toThrow(/tokens.seed must be from 0n/)
    expect(() => r.pick(text, { tokens: { ids: t, seed: SEED }, now: Infinity })).toThrow(/now must be a finite number/)
    expect(r.stats().slotsInUse).toBe(4) // nothing leased by the throws
  })

  it('validates the routing parameters', () => {
    expect(() => make({ exactBlockSize: 0 })).toThrow(/exactBlockSize must be an integer from 1 to 1024; got 0/)
    expect(() => make({ exactCapacity: 1000 })).toThrow(/exactCapacity must be an integer from 1024 to 67108864; got 1000/)
    expect(() => make({ cpuBlockWeight: 1.5 })).toThrow(/cpuBlockWeight must be a number from 0 to 1; got 1.5/)
    expect(() => make({ pendingMs: -1 })).toThrow(/pendingMs must be a number from 0 to 600000; got -1/)
    const r = make({ exactBlockSize: 32, exactCapacity: 4096, cpuBlockWeight: 0.25, pendingMs: 50 })
    expect(r.params).toMatchObject({ exactBlockSize: 32, exactCapacity: 4096, cpuBlockWeight: 0.25, pendingMs: 50 })
    expect(r.stats().exactCapacity).toBe(4096)
    r.configure({ exactCapacity: 8192 })
    expect(r.stats().exactCapacity).toBe(8192)
    expect(r.params.exactBlockSize).toBe(32)
  })

  it('returns distinct codes for a non-member, another block size, an orphan and a full index', () => {
    const r = make({ exactBlockSize: 1, exactCapacity: 1024 })
    const [a, b] = ids(2)
    const t = promptTokens(1, 1, 0, 1100)
    expect(r.exact.store('nobody', null, engineHashes(1, 2), t.subarray(0, 2), 1, SEED, 0)).toBe(EXACT_NOT_MEMBER)
    expect(r.exact.store(a!, null, engineHashes(1, 1), t.subarray(0, 16), 16, SEED, 0)).toBe(EXACT_BLOCK_SIZE)
    expect(r.exact.store(a!, 77n, engineHashes(1, 2), t.subarray(0, 2), 1, SEED, 0)).toBe(EXACT_ORPHAN)
    expect(r.stats()).toMatchObject({ exactOrphans: 1, exactEntries: 0 })
    expect(r.exact.store(a!, null, engineHashes(1, 1000), t.subarray(0, 1000), 1, SEED, 0)).toBe(1000)
    expect(r.exact.store(b!, null, engineHashes(2, 100), t.subarray(0, 100), 1, SEED, 1)).toBe(EXACT_CAPACITY)
    expect(r.stats()).toMatchObject({ exactEntries: 1024, exactDropped: 76 })
    expect(r.exact.instance(b!)).toEqual({ view: 'none', gpuBlocks: 0, offloadedBlocks: 24, pendingBlocks: 0 })
    expect(r.stats().exactMemoryBytes).toBeGreaterThan(1024 * 16)
    expect(r.exact.instance('nobody')).toBeUndefined()
    expect(r.exact.clear('nobody')).toBe(false)
    expect(r.exact.setView('nobody', 'fresh')).toBe(false)
    expect(r.exact.remove('nobody', engineHashes(1, 2), 0)).toBe(0)
    // A removal frees room: the next store fits.
    expect(r.exact.remove(a!, engineHashes(1, 10), 0)).toBe(10)
    expect(r.exact.store(b!, null, engineHashes(3, 10), t.subarray(0, 10), 1, SEED, 0)).toBe(10)
  })

  it('continues a chain from the parent block and reports leads per tier', () => {
    const r = make()
    const [a, b] = ids(2)
    const t = promptTokens(2, 1, 0, 16 * 6)
    const e = engineHashes(20, 6)
    // Blocks 0-2 on the GPU of a, then 3-5 offloaded, their parent block 2.
    expect(r.exact.store(a!, null, e.subarray(0, 3), t.subarray(0, 48), 16, SEED, 0)).toBe(3)
    expect(r.exact.store(a!, e[2]!, e.subarray(3), t.subarray(48), 16, SEED, 1)).toBe(3)
    // b has the first two blocks under other engine hashes.
    expect(r.exact.store(b!, null, engineHashes(30, 2), t.subarray(0, 32), 16, SEED, 0)).toBe(2)
    const rows = r.exact.match(t, SEED)
    expect(rows.map((x) => x.instance).sort()).toEqual(ids(4).sort())
    expect(rows.find((x) => x.instance === a)).toMatchObject({ blocks: 6, gpuBlocks: 3, offloadedBlocks: 3, pendingBlocks: 0 })
    expect(rows.find((x) => x.instance === b)).toMatchObject({ blocks: 2, gpuBlocks: 2 })
    // Another adapter's seed is another chain.
    expect(r.exact.match(t, exactSeed('lora-1', undefined)).every((x) => x.blocks === 0)).toBe(true)
    r.exact.clear(a!)
    expect(r.exact.match(t, SEED).find((x) => x.instance === a)!.blocks).toBe(0)
    expect(r.exact.instance(a!)).toEqual({ view: 'none', gpuBlocks: 0, offloadedBlocks: 0, pendingBlocks: 0 })
  })

  it('drops the view of an instance that leaves; one that comes back starts empty', () => {
    const r = make()
    const [a, b, c] = ids(3)
    r.exact.setView(a!, 'fresh')
    expect(storeAll(r, a!, promptTokens(3, 1, 0, 64), 3)).toBe(4)
    r.setInstances([{ id: b! }, { id: c! }])
    expect(r.exact.instance(a!)).toBeUndefined()
    expect(storeAll(r, a!, promptTokens(3, 1, 0, 64), 3)).toBe(EXACT_NOT_MEMBER)
    r.setInstances([{ id: a! }, { id: b! }, { id: c! }])
    expect(r.exact.instance(a!)).toEqual({ view: 'none', gpuBlocks: 0, offloadedBlocks: 0, pendingBlocks: 0 })
    expect(r.stats().exactEntries).toBe(0)
  })

  it('is allowed on an attached router, which keeps its own exact view', () => {
    const r = make({ shared: true })
    const att = Router.attach(r.sharedPath!)
    routers.push(att)
    const [a] = ids(1)
    expect(att.exact.setView(a!, 'fresh')).toBe(true)
    expect(storeAll(att, a!, promptTokens(4, 1, 0, 32), 4)).toBe(2)
    expect(att.exact.instance(a!)).toMatchObject({ view: 'fresh', gpuBlocks: 2 })
    expect(r.exact.instance(a!)).toMatchObject({ view: 'none', gpuBlocks: 0 })
  })
})

describe('exact view against a model', () => {
  // A straightforward model: per instance and tier, engine hash -> router hash; the router
  // hash of block i continues the chain from block i-1's (xxh3Blocks over the ids' bytes).
  it('equals the model after random store/remove/clear sequences', () => {
    const BS = 4
    const instances = ids(3)
    const seeds = [exactSeed(undefined, undefined), exactSeed('adapter', undefined)]
    // Prompts of two families sharing their opening blocks, 8 blocks each.
    const prompts = [0, 1, 2, 3].map((p) => promptTokens(p % 2, p, 12, 8 * BS))
    const bytes = (t: Uint32Array) => new Uint8Array(t.buffer, t.byteOffset, t.byteLength)
    // Router hashes per (prompt, seed): the whole chain.
    const chains = prompts.map((t) => seeds.map((s) => xxh3Blocks(bytes(t), BS * 4, s)))
    // Engine hash of block b of prompt p under seed s, variant v (two engine hashes, one block).
    const eh = (p: number, s: number, b: number, v: number) => BigInt(((p * 2 + s) * 2 + v) * 100 + b + 1)
    const op = fc.oneof(
      { weight: 6, arbitrary: fc.record({ kind: fc.constant('store' as const), i: fc.nat(2), p: fc.nat(3), s: fc.nat(1), from: fc.nat(7), len: fc.integer({ min: 1, max: 8 }), tier: fc.constantFrom(0 as const, 1 as const), v: fc.nat(1), parentV: fc.nat(1) }) },
      { weight: 3, arbitrary: fc.record({ kind: fc.constant('remove' as const), i: fc.nat(2), p: fc.nat(3), s: fc.nat(1), from: fc.nat(7), len: fc.integer({ min: 1, max: 4 }), tier: fc.constantFrom(0 as const, 1 as const), v: fc.nat(1) }) },
      { weight: 1, arbitrary: fc.record({ kind: fc.constant('clear' as const), i: fc.nat(2) }) },
    )
    fc.assert(
      fc.property(fc.array(op, { minLength: 1, maxLength: 60 }), (ops) => {
        const r = new Router({ strategy: 'longest_prefix', instances: instances.map((id) => ({ id })), exactBlockSize: BS })
        try {
          const model = instances.map(() => [new Map<bigint, bigint>(), new Map<bigint, bigint>()] as const)
          for (const o of ops) {
            const id = instances[o.i]!
            const m = model[o.i]!
            if (o.kind === 'clear') {
              expect(r.exact.clear(id)).toBe(true)
              m[0].clear()
              m[1].clear()
            } else if (o.kind === 'store') {
              const len = Math.min(o.len, 8 - o.from)
              const engine = BigUint64Array.from({ length: len }, (_, k) => eh(o.p, o.s, o.from + k, o.v))
              const toks = prompts[o.p]!.subarray(o.from * BS, (o.from + len) * BS)
              const parent = o.from === 0 ? null : eh(o.p, o.s, o.from - 1, o.parentV)
              const got = r.exact.store(id, parent, engine, toks, BS, seeds[o.s]!, o.tier)
              // The parent must be known in either tier; its router hash seeds the chain.
              const parentHash = parent === null ? seeds[o.s]! : (m[o.tier].get(parent) ?? m[1 - o.tier]!.get(parent))
              if (parentHash === undefined) {
                expect(got).toBe(EXACT_ORPHAN)
                continue
              }
              expect(got).toBe(len)
              const hs = xxh3Blocks(bytes(toks), BS * 4, parentHash)
              for (let k = 0; k < len; k++) m[o.tier].set(engine[k]!, hs[k]!)
            } else {
              const len = Math.min(o.len, 8 - o.from)
              const engine = BigUint64Array.from({ length: len }, (_, k) => eh(o.p, o.s, o.from + k, o.v))
              let expected = 0
              for (const e of engine) if (m[o.tier].delete(e)) expected++
              expect(r.exact.remove(id, engine, o.tier)).toBe(expected)
            }
            for (let i = 0; i < instances.length; i++) {
              expect(r.exact.instance(instances[i]!)).toEqual({ view: 'none', gpuBlocks: model[i]![0].size, offloadedBlocks: model[i]![1].size, pendingBlocks: 0 })
            }
          }
          expect(r.stats().exactEntries).toBe(model.reduce((n, m) => n + m[0].size + m[1].size, 0))
          // Every prompt's lead per instance: contiguous blocks held in either tier, GPU first.
          for (let p = 0; p < prompts.length; p++) {
            for (let s = 0; s < seeds.length; s++) {
              const rows = r.exact.match(prompts[p]!, seeds[s]!)
              for (let i = 0; i < instances.length; i++) {
                const gpu = new Set(model[i]![0].values())
                const off = new Set(model[i]![1].values())
                let lead = 0
                let g = 0
                for (const h of chains[p]![s]!) {
                  if (!gpu.has(h) && !off.has(h)) break
                  lead++
                  if (gpu.has(h)) g++
                }
                expect(rows.find((x) => x.instance === instances[i])).toMatchObject({ blocks: lead, gpuBlocks: g, offloadedBlocks: lead - g, pendingBlocks: 0 })
              }
            }
          }
        } finally {
          r.close()
        }
      }),
      { numRuns: 100 },
    )
  })
})

describe('longest_prefix with the exact view', () => {
  const TOKENS = 1024
  const prompt = promptTokens(7, 1, 0, TOKENS)
  const text = promptText(prompt)
  const all = ids(4)

  /** Where a router with no exact view at all sends the prompt (same options, same history). */
  function approximateChoice(opts: Partial<RouterOptions> = {}): string {
    const c = make(opts)
    const l = c.pick(text)
    l.release()
    return l.instance
  }
  function freshRouter(opts: Partial<RouterOptions> = {}): Router {
    const r = make(opts)
    for (const id of all) expect(r.exact.setView(id, 'fresh')).toBe(true)
    return r
  }
  const pickWith = (r: Router, now = 0) => {
    const l = r.pick(text, { tokens: { ids: prompt, seed: SEED }, now })
    l.release()
    return l
  }

  it('sends a prompt to the instance whose engine holds it, although this router never sent it there', () => {
    const home = approximateChoice()
    for (const holder of all.filter((id) => id !== home)) {
      const r = freshRouter()
      expect(storeAll(r, holder, prompt, 1)).toBe(TOKENS / 16)
      // Without the token ids the pick cannot know: the approximate choice...
      const plain = r.pick(text)
      plain.release()
      expect(plain.instance).toBe(home)
      expect(plain.exact).toBe(false)
      expect(plain.heldBlocks).toBe(0)
      // ...which the approximate index now remembers, and which the engines' word overrules.
      const l = pickWith(r)
      expect(l.instance).toBe(holder)
      expect(l.overflow).toBe(false)
      // The lease says which view decided and how much of the prompt the instance holds.
      expect(l.exact).toBe(true)
      expect(l.blocks).toBeGreaterThan(0)
      expect(l.heldBlocks).toBe(l.blocks)
      expect(l.heldShare).toBe(1)
      expect(r.exact.instance(holder)!.pendingBlocks).toBe(0) // it holds every block already
    }
  })

  it('weighs offloaded blocks by cpuBlockWeight', () => {
    const home = approximateChoice()
    const [gpuHolder, cpuHolder] = all.filter((id) => id !== home)
    // One holds half the prompt on its GPU, the other all of it offloaded: at weight 1 the
    // offloaded copy saves more, at 0.25 less.
    for (const [w, winner] of [[1, cpuHolder], [0.25, gpuHolder]] as const) {
      const r = freshRouter({ cpuBlockWeight: w })
      expect(storeAll(r, gpuHolder!, prompt.subarray(0, TOKENS / 2), 1)).toBe(TOKENS / 32)
      expect(storeAll(r, cpuHolder!, prompt, 2, 1)).toBe(TOKENS / 16)
      expect(pickWith(r).instance).toBe(winner)
    }
  })

  it('falls back to the approximate estimate for a stale instance', () => {
    const home = approximateChoice()
    const holder = all.find((id) => id !== home)!
    const r = freshRouter()
    storeAll(r, holder, prompt, 1)
    expect(r.exact.setView(holder, 'stale')).toBe(true)
    expect(r.exact.instance(holder)).toMatchObject({ view: 'stale', gpuBlocks: TOKENS / 16 })
    expect(pickWith(r).instance).not.toBe(holder)
    expect(r.exact.setView(holder, 'fresh')).toBe(true)
    expect(pickWith(r).instance).toBe(holder)
  })

  it('stops attracting the prompt to an instance whose blocks were removed', () => {
    const home = approximateChoice()
    const holder = all.find((id) => id !== home)!
    const r = freshRouter()
    storeAll(r, holder, prompt, 1)
    expect(pickWith(r).instance).toBe(holder)
    expect(r.exact.remove(holder, engineHashes(1, TOKENS / 16), 0)).toBe(TOKENS / 16)
    // The approximate index now says holder has it (the router sent it there); the engine says not.
    expect(pickWith(r).instance).not.toBe(holder)
  })

  it('records pending blocks: a second identical prompt follows the first before any event', () => {
    const r = freshRouter({ pendingMs: 1000 })
    const first = pickWith(r, 0)
    expect(r.exact.instance(first.instance)!.pendingBlocks).toBe(TOKENS / 16)
    expect(pickWith(r, 10).instance).toBe(first.instance)
    // The engine's events turn pending blocks real, without counting them twice.
    expect(storeAll(r, first.instance, prompt, 9)).toBe(TOKENS / 16)
    expect(r.exact.instance(first.instance)).toMatchObject({ gpuBlocks: TOKENS / 16, pendingBlocks: 0 })
    expect(r.stats().exactEntries).toBe(TOKENS / 16)

    // Without pending (or once it expired), the router's own record of the first pick does
    // not hold a fresh instance: the next prompt is placed afresh, away from the busier one.
    for (const [opts, later] of [[{ pendingMs: 0 }, 10], [{ pendingMs: 1000 }, 1000]] as const) {
      const q = freshRouter(opts)
      const a = pickWith(q, 0)
      expect(pickWith(q, later).instance).not.toBe(a.instance)
      expect(q.exact.instance(a.instance)!.pendingBlocks).toBe(0)
    }
  })

  it('picks exactly as before when no view is fresh, token ids or not', () => {
    const texts = Array.from({ length: 60 }, (_, i) => promptText(promptTokens(i % 5, i, 256, 512)))
    const plain = make()
    const withIds = make()
    storeAll(withIds, all[1]!, promptTokens(0, 0, 256, 512), 1) // stored, but no view is fresh
    for (const t of texts) {
      const a = plain.pick(t)
      const b = withIds.pick(t, { tokens: { ids: promptTokens(0, 0, 256, 512), seed: SEED }, now: 0 })
      expect(b.instance).toBe(a.instance)
      expect(b.overflow).toBe(a.overflow)
      a.release()
      b.release()
    }
  })
})
