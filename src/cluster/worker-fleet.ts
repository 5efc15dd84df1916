// A worker's side of the fleet: the instances the primary sends, applied to the worker's
// endpoints, and the passive signals the worker's traffic gives (a failed try, a refused
// connection) sent back to the primary, which alone decides ejections.
import type { Config } from '../config/config.js'
import { Router } from '../core/router.js'
import type { Endpoint, EndpointEvents, RemoteFleet } from '../fleet/endpoint.js'
import type { Instance } from '../fleet/instance.js'
import type { TryResult } from '../fleet/outlier.js'
import { applyMembership, type Membership } from './membership.js'
import type { SharedRouters, ToPrimary } from './messages.js'

const key = (endpoint: string, instance: string) => `${endpoint}\u0000${instance}`

export class WorkerFleet implements RemoteFleet {
  #routers: SharedRouters
  #memberships = new Map<string, Membership>()
  #endpoints = new Map<string, Endpoint>()
  /** Instances the primary counts a failure run for: a success here breaks it, so it is sent. */
  #failing = new Set<string>()
  readonly #upstream: Config['upstream']

  constructor(
    config: Config,
    routers: SharedRouters,
    fleet: Membership[],
    private readonly send: (m: ToPrimary) => void,
  ) {
    this.#upstream = config.upstream
    this.#routers = routers
    for (const m of fleet) this.#memberships.set(m.endpoint, m)
  }

  events(): Pick<EndpointEvents, 'router' | 'remote'> {
    return { router: (name: string) => this.#attach(name), remote: this }
  }

  /** The primary's shared state for the endpoint: it publishes membership and parameters there. */
  #attach(name: string): Router {
    const path = this.#routers[name]
    if (path === undefined) throw new Error(`the primary sent no shared routing state for endpoint '${name}'`)
    return Router.attach(path)
  }

  attached(ep: Endpoint): void {
    this.#endpoints.set(ep.name, ep)
    const m = this.#memberships.get(ep.name)
    if (m !== undefined) applyMembership(ep, m, this.#upstream)
  }

  /** A reload: endpoints that left are forgotten; new ones find their router here. */
  configure(config: Config, routers: SharedRouters): void {
    this.#routers = routers
    const names = new Set(config.endpoints.map((e) => e.name))
    for (const name of [...this.#endpoints.keys(), ...this.#memberships.keys()]) {
      if (names.has(name)) continue
      this.#endpoints.delete(name)
      this.#memberships.delete(name)
    }
  }

  membership(m: Membership): void {
    this.#memberships.set(m.endpoint, m)
    const ep = this.#endpoints.get(m.endpoint)
    if (ep !== undefined) applyMembership(ep, m, this.#upstream)
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

  markDown(ep: Endpoint, inst: Instance, reason: string): void {
    this.send({ prefixRouter: 'down', endpoint: ep.name, instance: inst.id, reason })
  }
}
