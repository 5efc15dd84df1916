// What the process building an endpoint tells it: where to log, how to make its router, and
// whom to tell of each change of membership or health (a `--workers` primary publishes them).
import type { Logger } from 'pino'
import type { Router } from '../core/router.js'
import type { RouterOptions } from '../core/options.js'
import type { Instance } from './instance.js'
import type { EjectionReason } from './outlier.js'

/** What a publisher reads of an endpoint: its name, its router and its instances. */
export interface HostView {
  readonly name: string
  readonly router: Router
  readonly instances: ReadonlyMap<string, Instance>
}

export interface EndpointEvents {
  log?: Logger
  onEjection?(instance: Instance, reason: EjectionReason): void
  /** Builds the endpoint's router (default: one of its own, in this process). */
  router?(endpoint: string, options: RouterOptions): Router
  /** After every membership or health change, before the router takes it: the process that owns the fleet publishes it. */
  onSync?(ep: HostView): void
}
