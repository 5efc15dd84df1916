// What the admin port reads of the running router and asks of it: the runtime as the admin
// routes see it. runtime.ts starts the admin server, so the admin files name this instead of
// importing Runtime back.
import type { Logger } from 'pino'
import type { Config } from '../../config/config.js'
import type { Endpoint } from '../../fleet/endpoint.js'
import type { ShareLoad } from '../../fleet/share/share-load.js'
import type { RouterMetrics } from '../../metrics/router-metrics.js'
import type { RequestKeying } from '../../request/keying.js'
import type { DecisionRing } from './decisions.js'

export interface AdminView {
  readonly config: Config
  readonly metrics: RouterMetrics
  readonly log: Logger
  readonly replicaId: string
  /** The exact view's tokenizer, and how a request is tokenized (POST /admin/route's dry run). */
  readonly keying: RequestKeying
  readonly shareLoad: ShareLoad | undefined
  /** The last decisions of requests through this process's HTTP front (none with --workers or in epp). */
  readonly decisions: DecisionRing
  /** This process handles front requests (not epp's runtime, not a --workers primary). */
  readonly routesRequests: boolean
  /** Shutting down: /health answers 503. */
  readonly draining: boolean
  endpoint(name: string | undefined): Endpoint | undefined
  endpoints(): Iterable<Endpoint>
  /** The text GET /metrics answers. */
  metricsText(): Promise<string>
  /** POST /admin/reload: what changed, sent back as JSON; throws ConfigError for a bad configuration. */
  reload(): unknown
}
