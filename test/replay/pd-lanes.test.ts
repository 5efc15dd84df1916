// Disaggregated replay lanes on the tiny profile: every lane serves every request, the legs go
// where the lane's router said, our lanes release every lease, and a run is deterministic.
import { describe, expect, it } from 'vitest'
import { PdLane } from '../../src/replay/pd/lane.js'
import { pdLanes, resolvePdLanes } from '../../src/replay/pd/lanes.js'
import { ourPd, SchedulerLane } from '../../src/replay/pd/ours.js'
import { runPdReplay, sweepRequests } from '../../src/replay/pd/run.js'
import { DEFAULT_SLO } from '../../src/replay/pd/stats.js'
import { prepareRequest } from '../../src/replay/prepare.js'
import { resolveParams } from '../../src/replay/types.js'
import { WORKLOADS } from '../../src/replay/workloads/index.js'
import { resolveSim } from '../../src/sim/config.js'

const sim = { profile: 'tiny' }
const small = { groups: 4, 'prompts-per-group': 4, 'system-tokens': 256, 'question-tokens': 32, 'output-tokens': 16, rate: 4 }

function requests(durationMs: number) {
  const w = WORKLOADS['shared-prefix']!
  return [...w.generate(resolveParams(w, small), { seed: 3, durationMs })]
}

const run = (lanes = pdLanes(), durationMs = 20_000, load = 1) =>
  runPdReplay({ requests: sweepRequests(requests(durationMs), load), lanes, prefill: 2, decode: 2, durationMs: durationMs / load, sim, prefixLength: 4096, seed: 1, slo: DEFAULT_SLO, kvEventsDelayMs: 5, load })

describe('disaggregated replay lanes', () => {
  it('runs every lane over the same requests, each finishing all of them, deterministically', async () => {
    const a = await run()
    const b = await run()
    expect(a.lanes.map((l) => l.lane)).toEqual(['aggregated', 'pd', 'pd_always', 'vllm_pd', 'sglang_pd', 'llmd_pd', 'dynamo_pd'])
    expect(a.requests).toBeGreaterThan(50)
    for (const l of a.lanes) {
      expect(l.requests, l.lane).toBe(a.requests)
      expect(l.ttftMs.p50, l.lane).toBeGreaterThan(0)
      expect(l.tpotMs.p90, l.lane).toBeGreaterThan(0)
      expect(l.tpotMs.p90, l.lane).toBeGreaterThanOrEqual(l.tpotMs.p50)
    }
    expect(b.lanes.map(({ lane, ttftMs, tpotMs, splitShare }) => ({ lane, ttftMs, tpotMs, splitShare }))).toEqual(
      a.lanes.map(({ lane, ttftMs, tpotMs, splitShare }) => ({ lane, ttftMs, tpotMs, splitShare })),
    )
    const by = (n: string) => a.lanes.find((l) => l.lane === n)!
    expect(by('aggregated').splitShare).toBe(0)
    for (const n of ['pd_always', 'vllm_pd', 'sglang_pd']) expect(by(n).splitShare, n).toBe(1)
    // The threshold alone skips the prefill leg of prompts whose group prefix the decode instance holds.
    const thresholdOnly = (await run([ourPd(256, 0)])).lanes[0]!
    expect(thresholdOnly.splitShare).toBeGreaterThan(0)
    expect(thresholdOnly.splitShare).toBeLessThan(1)
    // With the decode prefill cap (the default) no more are split: on this light load a split's
    // fixed cost is more than what a whole prefill stalls on the decode instance.
    expect(by('pd').splitShare).toBeLessThanOrEqual(thresholdOnly.splitShare)
  })

  it('a sweep replays the same requests closer together', async () => {
    const slow = await run(resolvePdLanes(['aggregated']), 20_000, 0.5)
    const fast = await run(resolvePdLanes(['aggregated']), 20_000, 2)
    expect(fast.requests).toBe(slow.requests)
    expect(fast.durationMs).toBe(slow.durationMs / 4)
  })

  it("our pd lane sends the legs to the instances of their roles and releases every lease", () => {
    const durationMs = 20_000
    const lane = new PdLane(ourPd(0), { prefill: 2, decode: 2, sim, prefixLength: 4096, seed: 1, durationMs, slo: DEFAULT_SLO, kvEventsDelayMs: 5 })
    const r = resolveSim(sim)
    const prep = { model: r.model, blockSize: r.engine.blockSize, tokenizer: r.tokenizer }
    let i = 0
    for (const req of requests(durationMs)) lane.arrive(prepareRequest(req, i++, prep))
    lane.drain()
    // Prefill legs hold blocks on engines 0 and 1; the decode legs read them on 2 and 3.
    expect(lane.fleet.engines[0]!.stats.kvHolds + lane.fleet.engines[1]!.stats.kvHolds).toBe(i)
    expect(lane.fleet.engines[2]!.stats.kvTransfers + lane.fleet.engines[3]!.stats.kvTransfers).toBe(i)
    expect(lane.stats.pulled).toBe(i)
    const router = (lane.router as SchedulerLane).router
    for (const e of lane.fleet.engines) expect(router.inFlight(e.id), e.id).toBe(0)
    lane.close()
  })

  it("our exact lanes follow the engines' KV events: a decode instance's view is what its engine stored", () => {
    const durationMs = 20_000
    const lane = new PdLane(ourPd(256, 2048, 'pd', 'exact'), { prefill: 2, decode: 2, sim, prefixLength: 4096, seed: 1, durationMs, slo: DEFAULT_SLO, kvEventsDelayMs: 5 })
    expect(lane.factory.name).toBe('pd:events')
    expect(lane.wantsKvEvents).toBe(true)
    const r = resolveSim(sim)
    const prep = { model: r.model, blockSize: r.engine.blockSize, tokenizer: r.tokenizer, withTokens: true }
    let i = 0
    for (const req of requests(durationMs)) lane.arrive(prepareRequest(req, i++, prep))
    lane.drain()
    const ours = lane.router as SchedulerLane
    expect(ours.refused).toEqual({ malformed: 0, orphan: 0, notMember: 0, blockSize: 0, capacity: 0 })
    // Every engine computed prompts (the prefill legs, the whole runs): each one's view is fresh and holds blocks.
    for (const e of lane.fleet.engines) {
      const v = ours.router.exact.instance(e.id)!
      expect(v.view, e.id).toBe('fresh')
      expect(v.gpuBlocks, e.id).toBeGreaterThan(0)
      expect(ours.router.inFlight(e.id), e.id).toBe(0)
    }
    // The group prefixes the decode instances hold skip the prefill leg, as with the approximate view.
    expect(lane.stats.split).toBeGreaterThan(0)
    expect(lane.stats.split).toBeLessThan(i)
    lane.close()
  })

  it('names our lanes with the exact view, and runs the default lanes without them', () => {
    expect(resolvePdLanes(['pd:events', 'PD_ALWAYS:events', 'aggregated:events']).map((l) => [l.name, l.kvEvents === true, l.aggregated === true])).toEqual([
      ['pd:events', true, false],
      ['pd_always:events', true, false],
      ['aggregated:events', true, true],
    ])
    expect(resolvePdLanes(undefined).some((l) => l.name.endsWith(':events'))).toBe(false)
  })

  it('refuses an unknown lane by name', () => {
    expect(() => resolvePdLanes(['pd', 'fastest'])).toThrow(/unknown lane 'fastest' with --prefill\/--decode; choose from aggregated, pd, pd_always/)
    expect(resolvePdLanes(['PD-Always']).map((l) => l.name)).toEqual(['pd_always'])
  })
})
