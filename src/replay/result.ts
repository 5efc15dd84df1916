// From the lanes' raw measurements to the numbers a report shows (and the JSON file
// holds): percentiles, rates, shares, the hit-rate timeline and the scale events' effect.
import type { Lane, ScaleEvent } from './lane.js'
import type { ReplayOptions, ReplaySource } from './options.js'
import { phaseResults, type PhaseResult } from './phases.js'
import { quantile } from './stats.js'
import type { TokenizerName } from '../sim/tokenizers/index.js'

export interface EventResult {
  atMs: number
  kind: 'add' | 'remove'
  /**
   * Of the requests in the window after the event whose routing key had been routed
   * before it, the share sent to another instance than that key's last one before it.
   */
  moved: number
  /** The same share over the window before the event (what moves without any event). */
  churn: number
  /** Token hit rate of the window before the event. */
  hitBefore: number
  /** Time from the event to the first window-long stretch whose hit rate is within 2 points of hitBefore; null if none before the next event or the end. */
  recoveryMs: number | null
  /** Of the requests in the window after the event, the share sent to the instance that joined (NaN for a removal). */
  joinedShare: number
  /** 1 / the fleet's size after the event. */
  fairShare: number
  /** A removal: the instances that the removed one's keys went to in the window after, and the largest share of them one took. */
  spreadTo: number
  spreadMax: number
}

export interface StrategyResult {
  strategy: string
  source: string
  /** Routed from the engines' KV events (after the run's kvEventsDelayMs). */
  kvEvents: boolean
  /** Weighed the engines' reported load (read every engineLoadIntervalMs). */
  engineLoad: boolean
  /** Its replicas shared their queued prefill (every shareLoadIntervalMs). */
  sharedLoad: boolean
  requests: number
  rejected: number
  ttftMs: { p50: number; p90: number; p99: number; mean: number }
  hitRate: number
  /**
   * hitRate / the ideal hit rate, an upper bound (src/replay/ideal.ts), so at most 1. In
   * closed loop, against the bound over the requests this strategy's lane sent.
   */
  ofIdeal: number
  throughput: { requestsPerSec: number; outputTokensPerSec: number }
  /** Share of requests per instance id (every instance that was ever in the fleet). */
  instanceShares: Record<string, number>
  shareMin: number
  shareMax: number
  /** Share of requests that overflowed; null for strategies without that notion. */
  overflowRate: number | null
  preemptions: number
  /** Hit rate per bucket of arrival time: [bucket start s, hit rate]. */
  timeline: [number, number][]
  /** TTFT quantiles for the CDF chart: [ms, cumulative share]. */
  cdf: [number, number][]
  events: EventResult[]
  /** Per phase of the workload (cache-pressure's rate steps); absent when it has none. */
  phases?: PhaseResult[]
}

export interface ReplayResult {
  source: ReplaySource
  instances: number
  durationMs: number
  profile: string
  /** The simulator's tokenizer, as `--tokenizer`. */
  tokenizer: TokenizerName
  seed: number
  prefixLength: number
  /** Null: each strategy's own default (10; none for longest_prefix). */
  concurrencyThreshold: number | null
  routerReplicas: number
  /** Closed-loop clients, or null for open-loop arrivals at the requests' timestamps. */
  clients: number | null
  windowMs: number
  /** Requests prepared: all of them in open loop, the most any lane sent in closed loop. */
  requests: number
  /**
   * The upper bound on any strategy's hit rate: Belady's offline-optimal cache of
   * capacityBlocks (every engine's KV blocks) over the requests (src/replay/ideal.ts).
   */
  ideal: { hitRate: number; capacityBlocks: number }
  strategies: StrategyResult[]
  /** The workload's sizing against the fleet, as the report prints it. */
  notes?: string[]
  /** Simulated delay of the engines' KV events to the event-fed routers. */
  kvEventsDelayMs: number
  /** How often each replica of the routers that weigh the engines' load read it; 0: never. */
  engineLoadIntervalMs: number
  /** How often replicas of the routers that share load published their queued prefill, and its delay. */
  shareLoadIntervalMs: number
  shareLoadDelayMs: number
  /** With router replicas: every strategy again with one router, on the same requests. */
  oneRouter?: StrategyResult[]
  wallMs: number
}

export interface SummaryInput {
  options: ReplayOptions
  lanes: readonly Lane[]
  /** The same strategies with one router (laneIdealHitRates continue over them). */
  oneRouterLanes?: readonly Lane[]
  events: readonly ScaleEvent[]
  windowMs: number
  idealHitRate: number
  /** Per lane, when lanes sent different requests (closed loop): the ideal over each lane's. */
  laneIdealHitRates?: readonly number[]
  idealCapacityBlocks: number
  requests: number
  wallMs: number
  profile: string
  tokenizer: TokenizerName
  kvEventsDelayMs: number
  engineLoadIntervalMs: number
  shareLoadIntervalMs: number
  shareLoadDelayMs: number
}

// 0.02 steps, then the tail: enough for a CDF chart, small enough to keep the SVG light.
const CDF_POINTS = [...Array.from({ length: 49 }, (_, i) => (i + 1) / 50), 0.99, 0.995, 0.999, 1]

export function summarize(s: SummaryInput): ReplayResult {
  const o = s.options
  const durS = o.durationMs / 1000
  const bucketS = Math.max(1, Math.round(durS / 60))
  const one = s.oneRouterLanes ?? []
  const strategies = [...s.lanes, ...one].map((lane, li): StrategyResult => {
    const st = lane.stats
    const sorted = st.ttftMs.sorted()
    let sum = 0
    for (const v of sorted) sum += v
    const ever = lane.everMembers
    const shares: Record<string, number> = {}
    let min = Infinity
    let max = -Infinity
    for (const i of [...ever].sort((a, b) => a - b)) {
      const share = st.routed === 0 ? 0 : st.perInstance[i]! / st.routed
      shares[lane.fleet.engines[i]!.id] = share
      min = Math.min(min, share)
      max = Math.max(max, share)
    }
    const hitRate = st.promptTokens === 0 ? NaN : st.cachedTokens / st.promptTokens
    const timeline: [number, number][] = []
    for (let t = 0; t < durS; t += bucketS) timeline.push([t, st.hitRate(t * 1000, Math.min(durS, t + bucketS) * 1000)])
    const moved = lane.tracker?.results() ?? []
    const events = s.events.map((ev, k): EventResult => {
      const end = s.events[k + 1]?.atMs ?? o.durationMs
      const hitBefore = st.hitRate(ev.atMs - s.windowMs, ev.atMs)
      let recoveryMs: number | null = null
      for (let t = ev.atMs; t + s.windowMs <= end; t += 1000) {
        if (st.hitRate(t, t + s.windowMs) >= hitBefore - 0.02) {
          recoveryMs = t - ev.atMs
          break
        }
      }
      const m = moved[k]
      return {
        atMs: ev.atMs,
        kind: ev.kind,
        moved: m?.moved ?? NaN,
        churn: m?.churn ?? NaN,
        hitBefore,
        recoveryMs,
        joinedShare: ev.kind === 'add' ? (m?.share ?? NaN) : NaN,
        fairShare: m?.fairShare ?? NaN,
        spreadTo: ev.kind === 'remove' ? (m?.spreadTo ?? 0) : 0,
        spreadMax: ev.kind === 'remove' ? (m?.spreadMax ?? NaN) : NaN,
      }
    })
    return {
      strategy: lane.factory.name,
      source: lane.factory.source,
      kvEvents: lane.wantsKvEvents,
      engineLoad: lane.readsEngineLoad,
      sharedLoad: lane.sharesLoad,
      requests: st.routed,
      rejected: st.rejected,
      ttftMs: {
        p50: quantile(sorted, 0.5),
        p90: quantile(sorted, 0.9),
        p99: quantile(sorted, 0.99),
        mean: sorted.length === 0 ? NaN : sum / sorted.length,
      },
      hitRate,
      ofIdeal: hitRate / (s.laneIdealHitRates?.[li] ?? s.idealHitRate),
      throughput: { requestsPerSec: st.completedInWindow / durS, outputTokensPerSec: st.outputInWindow / durS },
      instanceShares: shares,
      shareMin: min,
      shareMax: max,
      overflowRate: st.overflowKnown ? (st.routed === 0 ? 0 : st.overflow / st.routed) : null,
      preemptions: st.preemptions,
      timeline,
      cdf: CDF_POINTS.map((q) => [quantile(sorted, q), q]),
      events,
      ...(st.log !== null && o.phases !== undefined && { phases: phaseResults(st.log, o.phases) }),
    }
  })
  return {
    source: o.source,
    instances: o.instances,
    durationMs: o.durationMs,
    profile: s.profile,
    tokenizer: s.tokenizer,
    seed: o.seed,
    prefixLength: o.prefixLength,
    concurrencyThreshold: o.concurrencyThreshold ?? null,
    routerReplicas: o.routerReplicas,
    clients: o.clients ?? null,
    windowMs: s.windowMs,
    requests: s.requests,
    ideal: { hitRate: s.idealHitRate, capacityBlocks: s.idealCapacityBlocks },
    strategies: strategies.slice(0, s.lanes.length),
    ...(one.length > 0 && { oneRouter: strategies.slice(s.lanes.length) }),
    ...(o.notes !== undefined && o.notes.length > 0 && { notes: [...o.notes] }),
    kvEventsDelayMs: s.kvEventsDelayMs,
    engineLoadIntervalMs: s.engineLoadIntervalMs,
    shareLoadIntervalMs: s.shareLoadIntervalMs,
    shareLoadDelayMs: s.shareLoadDelayMs,
    wallMs: s.wallMs,
  }
}
