// The `--workers` worker's view of an endpoint: it neither probes nor discovers. Its host set
// follows the changes the primary publishes in the shared region (beside the ring it picks
// from), and the passive signals its traffic gives go to the primary, which alone decides
// health and ejections.
import type { Config, EndpointConfig } from '../config/config.js'
import type { Router } from '../core/router.js'
import { Endpoint, endpointLog } from '../fleet/endpoint.js'
import type { EndpointEvents } from '../fleet/endpoint-events.js'
import { HostSet } from '../fleet/host-set.js'
import type { Instance } from '../fleet/instance.js'
import type { TryResult } from '../fleet/outlier.js'
import { probeToken } from '../fleet/owner.js'
import { HostSetFollower } from './membership.js'

/** The worker's link to its primary, shared by its endpoints (WorkerFleet). */
export interface PrimaryLink {
  /** The primary's shared state for the endpoint. */
  routerFor(name: string): Router
  /** The endpoint follows the primary's record on the link's timer from now on. */
  attached(ep: WorkerEndpoint): void
  recordTry(ep: Endpoint, inst: Instance, result: TryResult): void
  /** Tells the primary the instance proved unreachable here. */
  down(ep: Endpoint, inst: Instance, reason: string): void
}

export class WorkerEndpoint extends Endpoint {
  /** The primary owns the fleet: nothing here writes membership or health but the primary's record. */
  readonly owner = undefined
  readonly #link: PrimaryLink
  readonly #follower: HostSetFollower

  constructor(config: Config, ep: EndpointConfig, events: EndpointEvents, link: PrimaryLink) {
    super(config, ep, events, new HostSet(), link.routerFor(ep.name), endpointLog(events, ep.name))
    this.#link = link
    this.#follower = new HostSetFollower(config.upstream)
    link.attached(this)
    this.follow()
    this.syncExact()
  }

  /** Reads the primary's record if it has published since; true when that changed the host set. */
  follow(): boolean {
    if (this.closed) return false
    return this.#follower.follow(this)
  }

  /** Where this view stands in the primary's changes, and how it last got there (tests, /admin). */
  get following(): HostSetFollower {
    return this.#follower
  }

  protected override refresh(): boolean {
    return this.follow()
  }

  /** The host set was written from the primary's record: the picks and the exact view follow it. */
  sync(): void {
    this.hosts.changed()
    this.syncExact()
  }

  /** A reload: routing for later picks and the exact view; the instances come from the primary. */
  update(config: Config, ep: EndpointConfig): Instance[] {
    // Read first, as the owner does: a token that cannot be read fails the reload before anything changes.
    probeToken(config, ep)
    const blockSize = this.router.params.exactBlockSize
    this.configure(config, ep)
    this.reloadExact(config, ep, blockSize)
    return []
  }

  recordTry(inst: Instance, result: TryResult): void {
    this.#link.recordTry(this, inst, result)
  }

  /**
   * Out of this worker's picks at once, and kept out through the records the primary writes
   * before it takes this report (the latest one read first, for the count of reports it had
   * taken until now); the primary takes it out everywhere.
   */
  markDown(inst: Instance, reason: string): void {
    if (inst.health.fail(reason) === 'down') this.log.warn({ instance: inst.id, reason: inst.lastError }, 'instance down')
    this.follow()
    const current = this.instances.get(inst.id)
    if (current !== undefined && this.#follower.hold(inst.id, reason)) {
      current.health.healthy = false
      current.health.lastError = reason
      this.#link.down(this, inst, reason)
    }
    this.sync()
  }

  async close(): Promise<void> {
    await this.closeView()
  }
}
