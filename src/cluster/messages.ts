// What the cluster primary and its workers say to each other over node:cluster's IPC
// channel. Every message carries `prefixRouter`, so that other users of the channel
// (prom-client's own cluster support, for one) are told apart.
import type { Registry } from 'prom-client'
import type { Config } from '../config/config.js'
import type { TryResult } from '../fleet/outlier.js'

/** Each endpoint's shared routing state, by endpoint name, as Router.attach opens it. */
export type SharedRouters = Record<string, string>

export type ToWorker =
  /** Instances are not sent: the primary publishes them in each endpoint's shared state (membership.ts). */
  | { prefixRouter: 'start'; config: Config; routers: SharedRouters }
  | { prefixRouter: 'config'; config: Config; routers: SharedRouters }
  /** An instance's failure run began (failing) or was broken: while it runs, successes are worth reporting. */
  | { prefixRouter: 'streak'; endpoint: string; instance: string; failing: boolean }
  | { prefixRouter: 'drain' }
  | { prefixRouter: 'metrics'; id: number }
  /** Handle requests: until then a worker listening holds them (the primary's banner comes first). */
  | { prefixRouter: 'serve' }

export type RequestCounts = Record<string, Record<string, number>>

/** A registry's metrics as prom-client's AggregatorRegistry takes them. */
export type WorkerMetrics = Awaited<ReturnType<Registry['getMetricsAsJSON']>>

export type ToPrimary =
  /** Listening for the start message: one sent before would have been lost. */
  | { prefixRouter: 'hello' }
  | { prefixRouter: 'ready'; url: string }
  | { prefixRouter: 'failed'; message: string; exitCode: number }
  | { prefixRouter: 'try'; endpoint: string; instance: string; result: TryResult }
  | { prefixRouter: 'down'; endpoint: string; instance: string; reason: string }
  | { prefixRouter: 'metrics'; id: number; metrics: WorkerMetrics }
  /** Requests the worker has sent to each instance so far, by endpoint and instance id. */
  | { prefixRouter: 'requests'; counts: RequestCounts }

export function isMessage<T extends ToWorker | ToPrimary>(m: unknown): m is T {
  return typeof m === 'object' && m !== null && typeof (m as { prefixRouter?: unknown }).prefixRouter === 'string'
}
