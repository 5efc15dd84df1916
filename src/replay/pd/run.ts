// A disaggregated replay: the requests prepared once and fed, in arrival order, to every lane:
// each lane a fleet of N prefill + M decode instances (or N + M aggregated ones) with its router.
// A load sweep replays the same requests with their arrival times divided by each factor
// (sweepRequests), so every load point sees the same prompts, only closer together.
import { resolveSim, type SimOptions } from '../../sim/config.js'
import { prepareRequest } from '../prepare.js'
import { quantile } from '../stats.js'
import type { TimedRequest } from '../types.js'
import { PdLane } from './lane.js'
import type { Slo } from './stats.js'
import type { PdRouterFactory } from './types.js'

export interface PdReplayOptions {
  requests: Iterable<TimedRequest> | AsyncIterable<TimedRequest>
  lanes: readonly PdRouterFactory[]
  prefill: number
  decode: number
  durationMs: number
  sim: SimOptions
  prefixLength: number
  seed: number
  slo: Slo
  kvEventsDelayMs: number
  /** The load factor these requests were scaled by, for the report (1: as generated). */
  load?: number
  onProgress?: (simMs: number, requests: number) => void
}

export interface Percentiles {
  p50: number
  p90: number
  p99: number
}

export interface PdLaneResult {
  lane: string
  source: string
  aggregated: boolean
  requests: number
  rejected: number
  ttftMs: Percentiles
  tpotMs: Percentiles
  /** Requests finished within the duration and within the SLO, per second, and their share of all requests. */
  goodput: number
  goodShare: number
  requestsPerSec: number
  outputTokensPerSec: number
  /** Share of requests given a prefill leg. */
  splitShare: number
  /** Share of the requests' prompt tokens no engine computed (cached, or pulled from a prefill instance that computed them once). */
  reuse: number
  /** Share of requests per instance, min and max, over the instances that decode. */
  shareMin: number
  shareMax: number
}

export interface PdReplayResult {
  load: number
  prefill: number
  decode: number
  durationMs: number
  requests: number
  slo: Slo
  profile: string
  lanes: PdLaneResult[]
  wallMs: number
}

export async function runPdReplay(o: PdReplayOptions): Promise<PdReplayResult> {
  const started = performance.now()
  const resolved = resolveSim(o.sim)
  const lanes = o.lanes.map(
    (f) =>
      new PdLane(f, {
        prefill: o.prefill,
        decode: o.decode,
        sim: o.sim,
        prefixLength: o.prefixLength,
        seed: o.seed,
        durationMs: o.durationMs,
        slo: o.slo,
        kvEventsDelayMs: o.kvEventsDelayMs,
      }),
  )
  const prep = {
    model: resolved.model,
    blockSize: resolved.engine.blockSize,
    tokenizer: resolved.tokenizer,
    withTokens: lanes.some((l) => l.wantsKvEvents),
  }
  let index = 0
  let promptTokens = 0
  try {
    for await (const r of o.requests) {
      if (r.at >= o.durationMs) break
      const p = prepareRequest(r, index++, prep)
      promptTokens += p.prompt.promptTokens
      for (const lane of lanes) lane.arrive(p)
      if ((index & 255) === 0) o.onProgress?.(r.at, index)
    }
    o.onProgress?.(o.durationMs, index)
    for (const lane of lanes) lane.drain()
    const durS = o.durationMs / 1000
    return {
      load: o.load ?? 1,
      prefill: o.prefill,
      decode: o.decode,
      durationMs: o.durationMs,
      requests: index,
      slo: o.slo,
      profile: resolved.profile.name,
      lanes: lanes.map((lane): PdLaneResult => {
        const st = lane.stats
        const ttft = st.ttftMs.sorted()
        const tpot = st.tpotMs.sorted()
        const shares = lane.decode.map((i) => (st.requests === 0 ? 0 : st.perInstance[i]! / st.requests))
        let computed = 0
        for (const e of lane.fleet.engines) computed += e.stats.computedTokens
        return {
          lane: lane.factory.name,
          source: lane.factory.source,
          aggregated: lane.factory.aggregated === true,
          requests: st.requests,
          rejected: st.rejected,
          ttftMs: { p50: quantile(ttft, 0.5), p90: quantile(ttft, 0.9), p99: quantile(ttft, 0.99) },
          tpotMs: { p50: quantile(tpot, 0.5), p90: quantile(tpot, 0.9), p99: quantile(tpot, 0.99) },
          goodput: st.goodInWindow / durS,
          goodShare: st.requests === 0 ? NaN : st.goodInWindow / st.requests,
          requestsPerSec: st.completedInWindow / durS,
          outputTokensPerSec: st.outputInWindow / durS,
          splitShare: st.requests === 0 ? NaN : st.split / st.requests,
          reuse: promptTokens === 0 ? NaN : Math.max(0, 1 - computed / promptTokens),
          shareMin: Math.min(...shares),
          shareMax: Math.max(...shares),
        }
      }),
      wallMs: performance.now() - started,
    }
  } finally {
    for (const lane of lanes) lane.close()
  }
}

/** The same requests with arrival times divided by `factor` (factor 2: twice the load, in half the time). */
export function* sweepRequests(requests: Iterable<TimedRequest>, factor: number): Generator<TimedRequest, void, undefined> {
  for (const r of requests) yield { ...r, at: r.at / factor }
}

export async function* sweepRequestsAsync(requests: AsyncIterable<TimedRequest> | Iterable<TimedRequest>, factor: number): AsyncGenerator<TimedRequest, void, undefined> {
  for await (const r of requests) yield { ...r, at: r.at / factor }
}
