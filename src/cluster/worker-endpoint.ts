// The `--workers` worker's view of an endpoint: it neither probes nor discovers. Its host set
// is written from the shared region the primary publishes to (beside the ring it picks from),
// and the passive signals its traffic gives go to the primary, which alone decides health and
// ejections.
import type { Config, EndpointConfig } from '../config/config.js'
import { Endpoint, endpointLog } from '../fleet/endpoint.js'
import type { EndpointEvents } from '../fleet/endpoint-events.js'
import { HostSet } from '../fleet/host-set.js'
import type { Instance } from '../fleet/instance.js'
import type { TryResult } from '../fleet/outlier.js'
import { probeToken } from '../fleet/owner.js'
import type { Router } from '../core/router.js'

/** The worker's link to its primary, shared by its endpoints (WorkerFleet). */
export interface PrimaryLink {
  /** The primary's shared state for the endpoint. */
  routerFor(name: string): Router
  /** The endpoint reads the primary's record now, and on the link's timer from then on. */
  attached(ep: Endpoint): void
  /** Reads the endpoint's record if the primary has published since; true when that changed the host set. */
  refresh(ep: Endpoint): boolean
  recordTry(ep: Endpoint, inst: Instance, result: TryResult): void
  markDown(ep: Endpoint, inst: Instance, reason: string): void
}

export class WorkerEndpoint extends Endpoint {
  /** The primary owns the fleet: nothing here writes membership or health but the primary's record. */
  readonly owner = undefined
  readonly #fleet: PrimaryLink

  constructor(config: Config, ep: EndpointConfig, events: EndpointEvents, fleet: PrimaryLink) {
    super(config, ep, events, new HostSet(), fleet.routerFor(ep.name), endpointLog(events, ep.name))
    this.#fleet = fleet
    fleet.attached(this)
    this.syncExact()
  }

  /** The host set was written from the primary's record: the picks and the exact view follow it. */
  sync(): void {
    this.hosts.changed()
    this.syncExact()
  }

  protected override refresh(): boolean {
    return this.#fleet.refresh(this)
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
    this.#fleet.recordTry(this, inst, result)
  }

  /** Out of this worker's picks at once; the primary takes it out everywhere once it has the report. */
  markDown(inst: Instance, reason: string): void {
    if (inst.health.fail(reason) === 'down') this.log.warn({ instance: inst.id, reason: inst.lastError }, 'instance down')
    this.#fleet.markDown(this, inst, reason)
    this.sync()
  }

  async close(): Promise<void> {
    await this.closeView()
  }
}
