// Scale-out is used at once: an instance added to a fleet whose prompts all have owners (the
// shared-prefix workload's 64 system prompts, all placed in the first minute) takes its share
// of requests within the minute after it joins, and only about 1/n of the keys move to it; when
// it leaves, its prompts go to more than one instance. Before the joining rule in longest_prefix,
// the added instance got 0% of requests for its whole first minute.
import { describe, expect, it } from 'vitest'
import { runReplay } from '../../src/replay/run.js'
import { resolveStrategies } from '../../src/replay/strategies.js'
import { sharedPrefix } from '../../src/replay/workloads/shared-prefix.js'

describe('an instance added mid-run', () => {
  it('takes at least half its fair share within a minute and moves at most 1.1/n of the keys; its keys spread when it leaves', async () => {
    const params = Object.fromEntries(sharedPrefix.params.map((p) => [p.flag, p.default]))
    const durationMs = 180_000
    const r = await runReplay({
      requests: sharedPrefix.generate(params, { seed: 1, durationMs }),
      source: { workload: 'shared-prefix', params },
      strategies: resolveStrategies(['longest_prefix', 'longest_prefix:events']),
      instances: 7,
      durationMs,
      sim: {},
      prefixLength: 4096,
      concurrencyThreshold: undefined,
      routerReplicas: 1,
      seed: 1,
      events: [
        { atMs: 60_000, kind: 'add' },
        { atMs: 120_000, kind: 'remove' },
      ],
    })
    for (const s of r.strategies) {
      const [add, remove] = s.events
      expect(add!.fairShare).toBeCloseTo(1 / 8)
      expect(add!.joinedShare, s.strategy).toBeGreaterThanOrEqual(0.5 * add!.fairShare)
      expect(add!.moved, s.strategy).toBeLessThanOrEqual(1.1 / 8)
      expect(remove!.spreadTo, s.strategy).toBeGreaterThan(1)
      // It lived only between the events, and served its share then.
      expect(s.instanceShares['sim-7'], s.strategy).toBeGreaterThan(0)
    }
  })
})
