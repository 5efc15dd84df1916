// The exactness target, through every real part but the socket: a simulated engine's KV events
// (with batches dropped at random, and restarts) applied by applyBatch to the router's native
// exact index. After every step, the router's view of the instance either equals the engine's
// cache (same number of blocks; for every prompt, the same count of leading blocks cached) or,
// when batches were lost since the view last started over, is marked stale and holds nothing
// the engine does not (no phantom block).
import fc from 'fast-check'
import { afterEach, describe, expect, it } from 'vitest'
import { exactSeed } from '../../../src/core/exact-seed.js'
import { Router } from '../../../src/core/router.js'
import { applyBatch, newCounts } from '../../../src/fleet/events/apply.js'
import type { KvEvent } from '../../../src/fleet/events/types.js'
import { VirtualFleet } from '../../../src/sim/index.js'

const ID = 'sim-0'
let router: Router | undefined
afterEach(() => {
  router?.close()
  router = undefined
})

interface Prompt {
  text: string
  model: string | undefined
  salt: string | undefined
}

// Prompts sharing openings (a system prompt, a document) so that chains branch, under two
// models (the base and a LoRA adapter) and three cache salts.
function pool(): Prompt[] {
  const out: Prompt[] = []
  const sys = ['You are terse. '.repeat(12), 'You are verbose and kind. '.repeat(9)]
  for (let i = 0; i < 24; i++) {
    out.push({
      text: `${sys[i % 2]}${i % 3 === 0 ? 'Document A. '.repeat(10) : ''}Question ${i}: ${'why '.repeat(8 + (i % 5) * 6)}`,
      model: i % 4 === 3 ? 'ad' : undefined,
      salt: i % 5 === 4 ? `tenant-${i % 3}` : undefined,
    })
  }
  return out
}

type Step = { kind: 'request'; prompt: number; tokens: number } | { kind: 'restart' } | { kind: 'reset' }

const step: fc.Arbitrary<Step> = fc.oneof(
  { weight: 40, arbitrary: fc.record({ kind: fc.constant('request' as const), prompt: fc.nat(23), tokens: fc.integer({ min: 1, max: 6 }) }) },
  { weight: 1, arbitrary: fc.constant({ kind: 'restart' as const }) },
  { weight: 1, arbitrary: fc.constant({ kind: 'reset' as const }) },
)

describe('the exact view against the engine it follows', () => {
  it('equals the cache after every step, or is stale and holds no phantom', () => {
    // What the runs went through, so that the property is known to have met every case.
    const seen = { checks: 0, staleChecks: 0, removed: 0, restarts: 0, losses: 0 }
    fc.assert(
      fc.property(fc.array(step, { minLength: 200, maxLength: 400 }), fc.integer({ min: 0, max: 1000 }), (steps, dropSeed) => {
        const fleet = new VirtualFleet({ instances: 1, profile: 'tiny', kvBlocks: 40, loras: ['ad'], kvEvents: true })
        const engine = fleet.engines[0]!
        router?.close()
        router = new Router({ instances: [{ id: ID }], strategy: 'longest_prefix' })
        const r = router
        const blockSize = engine.config.blockSize
        r.exact.setView(ID, 'fresh')
        const counts = newCounts()
        // The channel: batches numbered per engine process; one in ~25 lost. A lost batch is
        // seen as a gap at the next one, as the subscriber sees it: the view starts over, stale.
        let rng = dropSeed + 1
        const drop = () => ((rng = (rng * 1103515245 + 12345) % 2 ** 31) % 25) === 0
        let lostSinceReset = false
        let pendingGap = false
        let restartedUnseen = false
        engine.setKvEventListener((events: KvEvent[]) => {
          if (drop()) {
            seen.losses++
            pendingGap = true
            return
          }
          if (pendingGap || restartedUnseen) {
            // A gap (or a restart: sequence back to 0) found at this batch: start over.
            r.exact.clear(ID)
            lostSinceReset = pendingGap
            r.exact.setView(ID, pendingGap ? 'stale' : 'fresh')
            pendingGap = false
            restartedUnseen = false
          }
          applyBatch(r, ID, { ts: 0, events, dataParallelRank: null }, blockSize, counts)
        })
        const prompts = pool().map((p) => ({ p, prepared: fleet.prepare({ text: p.text, ...(p.model && { model: p.model }), ...(p.salt && { cacheSalt: p.salt }) }) }))
        const found = { hits: 0, freeHits: 0 }
        for (const s of steps) {
          if (s.kind === 'restart') {
            engine.restart()
            seen.restarts++
            restartedUnseen = true
          } else if (s.kind === 'reset') engine.resetPrefixCache()
          else {
            const { p, prepared } = prompts[s.prompt]!
            fleet.submit(0, { prepared, maxTokens: s.tokens, ...(p.model && { model: p.model }), ...(p.salt && { cacheSalt: p.salt }) })
          }
          fleet.run()
          // Nothing has told the router yet: a lost batch shows as a gap at the next one, a restart
          // as sequence 0 at the next one (a real restart also drops the connection and fails
          // health checks). The view is checked once the events are in.
          if (restartedUnseen || pendingGap) continue
          const view = r.exact.instance(ID)!
          seen.checks++
          if (lostSinceReset) seen.staleChecks++
          expect(view.view).toBe(lostSinceReset ? 'stale' : 'fresh')
          if (!lostSinceReset) expect(view.gpuBlocks).toBe(engine.cache.cachedBlocks)
          else expect(view.gpuBlocks).toBeLessThanOrEqual(engine.cache.cachedBlocks)
          for (const { p, prepared } of prompts) {
            engine.cache.lookup(prepared.blockKeys, prepared.blockKeys.length, found)
            const m = r.exact.match(prepared.tokenIds!, exactSeed(p.model, p.salt), 0).find((x) => x.instance === ID)!
            if (lostSinceReset) expect(m.blocks).toBeLessThanOrEqual(found.hits)
            else expect(m.blocks).toBe(found.hits)
          }
        }
        seen.removed += counts.removed
        return counts.stored > 0
      }),
      { numRuns: 12, seed: 21 },
    )
    expect(seen.checks).toBeGreaterThan(2000)
    expect(seen.staleChecks).toBeGreaterThan(0)
    expect(seen.removed).toBeGreaterThan(0)
    expect(seen.restarts).toBeGreaterThan(0)
    expect(seen.losses).toBeGreaterThan(0)
  })
})
