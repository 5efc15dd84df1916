// What the request path needs of the running router: its configuration, metrics and log, the
// endpoints, and the counts a shutdown and the retry budget read.
import type { Logger } from 'pino'
import type { Config } from '../config/config.js'
import type { Endpoint } from '../fleet/endpoint.js'
import type { RouterMetrics } from '../metrics/router-metrics.js'
import type { ClientState } from './forward.js'
import type { DecisionRing } from '../runtime/admin/decisions.js'
import type { PrefillPods } from './pd/prefill-pods.js'
import type { RequestKeying } from '../request/keying.js'

export interface ProxyCore {
  readonly config: Config
  readonly metrics: RouterMetrics
  readonly log: Logger
  /** A request's key and tokens, before the pick. */
  readonly keying: RequestKeying
  endpoint(name: string | undefined): Endpoint | undefined
  endpoints(): Iterable<Endpoint>
  /** Proxied requests in flight, and how many of them are on a retry (for the retry budget). */
  readonly traffic: { active: number; retrying: number }
  /** Every front request being handled, so that a shutdown can end what is left. */
  readonly requests: Set<ClientState>
  /** Shutting down: /health and /ping answer 503 so that load balancers stop sending. */
  readonly draining: boolean
  /** The last requests' decisions, for the admin port's status page. */
  readonly decisions: DecisionRing
  /** As a decode pod's sidecar (sidecar.enabled): the prefill pods the endpoint picker names. */
  readonly prefillPods: PrefillPods | undefined
}
