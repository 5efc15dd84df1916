// The key property of the engine's KV events: a view built from nothing but the published
// events is the engine's cache, block for block, whenever no event was lost, and knows it
// is stale when some were. One virtual engine with a tiny cache runs a few thousand random
// actions (requests over shared prefixes, LoRA adapters and salts, clock advances, aborts,
// prefix-cache resets, process restarts) while a lossy transport numbers its batches as
// vLLM's publisher does and drops some; the view is checked after every action.
import fc from 'fast-check'
import { describe, expect, it } from 'vitest'
import { exactSeed } from '../../src/core/exact-seed.js'
import { xxh3, xxh3Blocks } from '../../src/core/hash.js'
import type { BlockStoredEvent, KvEvent } from '../../src/fleet/events/types.js'
import { cacheSeed, encodeTokenIds, preparePrompt, resolveSim, SimEngine, VirtualClock, type Sequence } from '../../src/sim/index.js'

/** What a consumer can know from (seq, events) alone, plus the reconnect a new process causes. */
class ModelView {
  readonly blocks = new Set<bigint>()
  /** The router's own hash of every engine block seen stored (a function of its content, so never forgotten). */
  readonly routerHash = new Map<bigint, bigint>()
  chained = 0
  stale = false
  private last = -1
  private awaitingFirst = false

  /**
   * The connection dropped and came back (a restarted engine is a new process): what it
   * held is gone, and until a batch numbered 0 shows the new process from its start the
   * view cannot know what it missed.
   */
  reconnect(): void {
    this.blocks.clear()
    this.stale = true
    this.awaitingFirst = true
  }

  receive(seq: number, events: KvEvent[]): void {
    if (this.awaitingFirst) {
      this.awaitingFirst = false
      if (seq === 0) this.stale = false
    } else if (seq !== this.last + 1) {
      // A gap, or a sequence number going back without a reconnect (a restart seen only in
      // the numbers): start over; exact only from a new process's first batch.
      this.blocks.clear()
      this.stale = seq !== 0 || this.stale
      if (seq === 0) this.stale = false
    }
    this.last = seq
    for (const e of events) {
      if (e.type === 'BlockStored') {
        this.chain(e)
        for (const h of e.blockHashes) {
          expect(this.blocks.has(h as bigint), `stored twice: ${h}`).toBe(false)
          this.blocks.add(h as bigint)
        }
      } else if (e.type === 'BlockRemoved') {
        for (const h of e.blockHashes) {
          // Removing a block this view never saw stored is only possible once events were lost.
          if (!this.blocks.delete(h as bigint)) expect(this.stale, `removed unknown ${h}`).toBe(true)
        }
      } else this.blocks.clear()
    }
  }

  /**
   * The router's chain over the published tokens: block 0 seeded by the adapter's name and
   * the cache_salt found in its extra keys, every later block by its parent's router hash.
   */
  private chain(e: BlockStoredEvent): void {
    let seed: bigint | undefined
    if (e.parentBlockHash === null) {
      const first = e.extraKeys?.[0] ?? []
      const salt = first.length > (e.loraName === null ? 0 : 1) ? (first.at(-1) as string) : undefined
      seed = exactSeed(e.loraName ?? undefined, salt)
    } else seed = this.routerHash.get(e.parentBlockHash as bigint)
    if (seed === undefined) return // the parent's event was lost
    expect(e.tokenIds.length).toBe(e.blockHashes.length * e.blockSize)
    e.blockHashes.forEach((h, i) => {
      const bytes = encodeTokenIds(e.tokenIds.slice(i * e.blockSize, (i + 1) * e.blockSize))
      seed = xxh3(bytes, seed)
      this.routerHash.set(h as bigint, seed)
      this.chained++
    })
  }
}

function mulberry32(seed: number): () => number {
  let s = seed >>> 0
  return () => {
    let t = (s = (s + 0x6d2b79f5) >>> 0)
    t = Math.imul(t ^ (t >>> 15), t | 1)
    t ^= t + Math.imul(t ^ (t >>> 7), t | 61)
    return ((t ^ (t >>> 14)) >>> 0) / 4294967296
  }
}

interface RunStats {
  checks: number
  /** Checks where the view had to equal the cache, and where it had to know it was stale. */
  exactChecks: number
  staleChecks: number
  stored: number
  removed: number
  restarts: number
  resets: number
  chained: number
}

function run(seed: number, dropRate: number, steps: number): RunStats {
  const rnd = mulberry32(seed)
  const pick = (n: number): number => Math.floor(rnd() * n)
  const sim = resolveSim({ profile: 'tiny', kvBlocks: 24, blockSize: 4, maxNumSeqs: 4, maxNumBatchedTokens: 32 })
  const bs = sim.engine.blockSize
  const clock = new VirtualClock()
  const engine = new SimEngine('e', clock, sim.engine)
  const view = new ModelView()
  const stats: RunStats = { checks: 0, exactChecks: 0, staleChecks: 0, stored: 0, removed: 0, restarts: 0, resets: 0, chained: 0 }
  // The transport: vLLM's publisher numbers batches from 0 per process; some never arrive.
  let seq = 0
  // Ground truth. `missing`: the view lacks something and has been able to tell (a later
  // batch arrived after a dropped one, or the connection dropped): it must be stale.
  // `unseen`: a batch was dropped and none has arrived since, so no consumer can tell yet.
  let missing = false
  let unseen = false
  engine.setKvEventListener((events) => {
    for (const e of events) {
      if (e.type === 'BlockStored') stats.stored += e.blockHashes.length
      if (e.type === 'BlockRemoved') stats.removed += e.blockHashes.length
    }
    const s = seq++
    if (rnd() < dropRate) {
      unseen = true
      return
    }
    view.receive(s, events)
    if (s === 0) missing = false // a new process's first batch: the view is exact again
    else if (unseen) missing = true
    unseen = false
  })

  // Shared prefixes make hits, evictions of shared blocks and duplicate computations likely.
  const bases = Array.from({ length: 4 }, (_, b) => Array.from({ length: 64 }, (_, i) => 1000 * (b + 1) + i))
  const adapters = [undefined, 'ad1', 'ad2']
  const salts = [undefined, 'tenant']
  const inflight: Sequence[] = []
  const expectedRouterHash = new Map<bigint, bigint>()

  const check = (): void => {
    stats.checks++
    if (missing) {
      expect(view.stale).toBe(true)
      stats.staleChecks++
    } else if (!unseen) {
      expect(view.stale).toBe(false)
      expect([...view.blocks].sort()).toEqual(engine.cache.cachedKeys().map((k) => BigInt(k)).sort())
      stats.exactChecks++
    }
  }

  for (let i = 0; i < steps; i++) {
    const r = rnd()
    if (r < 0.45) {
      const base = bases[pick(bases.length)]!
      const ids = [...base.slice(0, 4 + pick(48)), ...Array.from({ length: pick(12) }, () => pick(50_000))]
      const lora = adapters[pick(adapters.length)]
      const salt = salts[pick(salts.length)]
      const p = preparePrompt(encodeTokenIds(ids), bs, cacheSeed(lora ?? sim.model, salt), true)
      const maxTokens = 1 + pick(8)
      // What the router computes for this prompt by itself: the chain its BlockStored events must lead to.
      const own = xxh3Blocks(encodeTokenIds(ids), bs * 4, exactSeed(lora, salt))
      p.blockKeys.forEach((k, b) => expectedRouterHash.set(BigInt(k), own[b]!))
      if (engine.check(p.promptTokens, maxTokens) === undefined) {
        const seqObj = engine.submit({
          promptTokens: p.promptTokens,
          blockKeys: p.blockKeys,
          tokenIds: p.tokenIds!,
          maxTokens,
          ...(lora !== undefined ? { loraName: lora } : {}),
          ...(salt !== undefined ? { cacheSalt: salt } : {}),
        })
        inflight.push(seqObj)
      }
    } else if (r < 0.85) {
      clock.runUntil(clock.now() + pick(30))
    } else if (r < 0.93) {
      const s = inflight[pick(inflight.length)]
      if (s !== undefined && !s.done) engine.abort(s)
    } else if (r < 0.97) {
      if (engine.resetPrefixCache()) stats.resets++
    } else {
      engine.restart()
      view.reconnect()
      seq = 0
      missing = true // until the new process's batch 0 arrives
      unseen = false
      stats.restarts++
    }
    for (let k = inflight.length - 1; k >= 0; k--) if (inflight[k]!.done) inflight.splice(k, 1)
    check()
  }
  clock.run()
  check()
  // Every block the view could chain lands on the router's own hash of the request's tokens.
  for (const [engineKey, h] of view.routerHash) expect(h).toBe(expectedRouterHash.get(engineKey))
  stats.chained = view.chained
  return stats
}

describe('KV events are an exact account of the cache', () => {
  it('without losses the view equals the cache after every action', () => {
    fc.assert(
      fc.property(fc.integer({ min: 1, max: 2 ** 31 }), (seed) => {
        const s = run(seed, 0, 3000)
        expect(s.exactChecks).toBeGreaterThan(s.checks / 2)
        expect(s.chained).toBe(s.stored) // nothing lost: every stored block was placed on the router's chain
        expect(s.removed).toBeGreaterThan(0) // the tiny cache did evict
        expect(s.restarts + s.resets).toBeGreaterThan(0)
      }),
      { numRuns: 8 },
    )
  })

  it('with dropped batches the view is exact whenever nothing was lost, and stale otherwise', () => {
    let exact = 0
    let stale = 0
    fc.assert(
      fc.property(fc.integer({ min: 1, max: 2 ** 31 }), fc.constantFrom(0.01, 0.05, 0.2), (seed, dropRate) => {
        const s = run(seed, dropRate, 3000)
        exact += s.exactChecks
        stale += s.staleChecks
      }),
      { numRuns: 8 },
    )
    // Both sides of the property were exercised.
    expect(exact).toBeGreaterThan(0)
    expect(stale).toBeGreaterThan(0)
  })
})
