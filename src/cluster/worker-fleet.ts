// A worker's side of the fleet: the instances the primary publishes in each endpoint's shared
// routing state, applied to the worker's endpoints, and the passive signals the worker's
// traffic gives (a failed try, a refused connection) sent back to the primary, which alone
// decides ejections.
import type { Config, EndpointConfig } from '../config/config.js'
import { Router } from '../core/router.js'
import type { Endpoint } from '../fleet/endpoint.js'
import type { EndpointEvents } from '../fleet/endpoint-events.js'
import type { Instance } from '../fleet/instance.js'
import type { TryResult } from '../fleet/outlier.js'
import type { SharedRouters, ToPrimary } from './messages.js'
import { WorkerEndpoint, type PrimaryLink } from './worker-endpoint.js'

const key = (endpoint: string, instance: string) => `${endpoint}\u0000${instance}`

/**
 * How often an idle worker reads the records (a pick that cannot be served reads them at
 * once): what it reports and serves besides picks (GET /v1/models, the exact view's
 * subscriptions) follows the primary within this.
 */
const REFRESH_EVERY_MS = 200

export class WorkerFleet implements PrimaryLink {
  #routers: SharedRouters
  #endpoints = new Map<string, WorkerEndpoint>()
  /** Instances the primary counts a failure run for: a success here breaks it, so it is sent. */
  #failing = new Set<string>()
  readonly #timer: NodeJS.Timeout

  constructor(
    routers: SharedRouters,
    private readonly send: (m: ToPrimary) => void,
  ) {
    this.#routers = routers
    this.#timer = setInterval(() => {
      for (const ep of this.#endpoints.values()) ep.follow()
    }, REFRESH_EVERY_MS)
    this.#timer.unref()
  }

  /** The worker's endpoints: each a view of the primary's, following the shared region. */
  readonly build = (config: Config, ep: EndpointConfig, events: EndpointEvents): WorkerEndpoint => new WorkerEndpoint(config, ep, events, this)

  /** The primary's shared state for the endpoint: it publishes membership and parameters there. */
  routerFor(name: string): Router {
    const path = this.#routers[name]
    if (path === undefined) throw new Error(`the primary sent no shared routing state for endpoint '${name}'`)
    return Router.attach(path)
  }

  attached(ep: WorkerEndpoint): void {
    this.#endpoints.set(ep.name, ep)
  }

  /** A reload: endpoints that left are forgotten; new ones find their router here. */
  configure(config: Config, routers: SharedRouters): void {
    this.#routers = routers
    const names = new Set(config.endpoints.map((e) => e.name))
    for (const name of this.#endpoints.keys()) if (!names.has(name)) this.#endpoints.delete(name)
  }

  close(): void {
    clearInterval(this.#timer)
  }

  streak(endpoint: string, instance: string, failing: boolean): void {
    if (failing) this.#failing.add(key(endpoint, instance))
    else this.#failing.delete(key(endpoint, instance))
  }

  recordTry(ep: Endpoint, inst: Instance, result: TryResult): void {
    // Successes only matter to a failure run; sending every one would cost an IPC message a request.
    if (result === 'ok') {
      if (!this.#failing.delete(key(ep.name, inst.id))) return
    }
    this.send({ prefixRouter: 'try', endpoint: ep.name, instance: inst.id, result })
  }

  down(ep: Endpoint, inst: Instance, reason: string): void {
    this.send({ prefixRouter: 'down', endpoint: ep.name, instance: inst.id, reason })
  }
}
