// What a replay is asked to run: the requests, the strategies, the fleet and the simulated
// delays. Apart from run.ts (which runs it) so that result.ts, which reports it, need not
// import the runner.
import type { SimOptions } from '../sim/config.js'
import type { ScaleEvent } from './lane.js'
import type { RouterFactory } from './routers.js'
import type { Phase, TimedRequest } from './types.js'

/** What produced the requests: a workload and its parameters, or a trace file. */
export type ReplaySource = { workload: string; params: Record<string, number> } | { trace: string }

export interface ReplayOptions {
  requests: Iterable<TimedRequest> | AsyncIterable<TimedRequest>
  /** What produced the requests, for the report. */
  source: ReplaySource
  strategies: readonly RouterFactory[]
  instances: number
  durationMs: number
  sim: SimOptions
  prefixLength: number
  /** Undefined: each strategy's own default (10; none for longest_prefix). */
  concurrencyThreshold: number | undefined
  routerReplicas: number
  seed: number
  events: readonly ScaleEvent[]
  /** Window of the moved-share and recovery measurements (default 60 s). */
  windowMs?: number
  /**
   * Closed loop: this many clients, each sending the next request when its last one has
   * finished; the requests' timestamps are ignored, and clients stop when the requests run
   * out. Needs a synchronous request source (a workload, or readTrace) and no scale events.
   */
  clients?: number
  /** Simulated delay of the engines' KV events to the routers fed by them (default 5 ms). */
  kvEventsDelayMs?: number
  /** How often each router replica reads its engines' load, for routers that weigh it (default 100 ms; 0: never). */
  engineLoadIntervalMs?: number
  /** How often replicas of the routers that share load publish their queued prefill (default 20 ms; 0: never)… */
  shareLoadIntervalMs?: number
  /** …and how long it takes to reach the others (default 1 ms). */
  shareLoadDelayMs?: number
  /**
   * With routerReplicas > 1, also run every strategy with one router, for the side-by-side
   * table (default true).
   */
  compareOneRouter?: boolean
  /** Stretches of arrival time to report on their own (a workload's rate steps). */
  phases?: readonly Phase[]
  /** Lines the report prints before its tables (a workload's sizing). */
  notes?: readonly string[]
  /** Called now and then with the simulated time reached. */
  onProgress?: (simMs: number, requests: number) => void
}
