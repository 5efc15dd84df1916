// An endpoint as the requests see it: the view a pick is made in. It holds the instances this
// process routes to (a host set), the router over them, and the exact view following the ones
// in rotation. Who writes the host set is a separate concern: in the process that owns the
// fleet its owner does (LocalEndpoint, fleet/owner.ts); in a `--workers` worker the shared
// region does (cluster/worker-endpoint.ts). Models and adapters are router groups, so a
// request for model M is routed among the instances serving M only.
import { pino, type Logger } from 'pino'
import type { EndpointEvents } from './endpoint-events.js'
import { endpointRouting, type Config, type EndpointConfig, type RoutingConfig } from '../config/config.js'
import { noHealthyInstance, RequestError } from '../core/errors.js'
import { echo } from '../core/echo.js'
import { NoInstanceError, type Lease, type Router } from '../core/router.js'
import { STRATEGY_INFO, strategyInfo } from '../core/strategies.js'
import type { HostEntry } from './host-entry.js'
import type { Instance } from './instance.js'
import type { TryResult } from './outlier.js'
import { ExactView } from './events/exact-view.js'
import type { ExactTokens } from '../core/router.js'
import type { DisaggregationConfig } from '../config/disaggregation.js'
import { legGroup, type Leg } from './groups.js'
import { roleCounts, type RoleCounts } from './roles.js'
import { HostSet, LEG_MISSING, MODEL_DOWN, MODEL_UNKNOWN, type RouterGroup } from './host-set.js'
import type { FleetOwner } from './owner.js'
import type { EngineLoadScraper } from './load/scraper.js'

export type { EndpointEvents, HostView } from './endpoint-events.js'

/** Builds the view of one endpoint: the process's role chooses which, once. */
export type BuildEndpoint = (config: Config, ep: EndpointConfig, events: EndpointEvents) => Endpoint

/** Tries of one pick that named an instance this process does not route to (the router's avoid list holds 16). */
const MAX_REPICKS = 8

export interface Pick {
  lease: Lease
  instance: Instance
}

/** The endpoint's logger (silent by default), as its owner and its view both log. */
export function endpointLog(events: EndpointEvents, name: string): Logger {
  return (events.log ?? pino({ level: 'silent' })).child({ endpoint: name })
}

export abstract class Endpoint {
  readonly name: string
  readonly router: Router
  routing: RoutingConfig
  /** The exact cache view (kvEvents configured): the instances' own KV-cache events. */
  exact: ExactView | undefined
  /** What the picks read: written by the owner, or from the shared region. */
  protected readonly hosts: HostSet
  protected readonly log: Logger
  #config: Config
  /** This endpoint's own configuration (its instances' KV-event addresses, among others). */
  #epConfig: EndpointConfig
  #closed = false
  /** How the host set names a group to the router: made once, not on every pick. */
  readonly #groupId = (name: string): number => this.router.groupId(name)

  /** The writer of membership and health, when this process owns the fleet (undefined in a `--workers` worker). */
  abstract readonly owner: FleetOwner | undefined

  protected constructor(config: Config, ep: EndpointConfig, events: EndpointEvents, hosts: HostSet, router: Router, log: Logger) {
    this.name = ep.name
    this.#config = config
    this.#epConfig = ep
    this.routing = endpointRouting(config, ep)
    this.hosts = hosts
    this.router = router
    this.log = log
    this.exact = this.#exactView(config, ep)
  }

  get instances(): Map<string, Instance> {
    return this.hosts.instances
  }

  /** Load from the engines, read by the owner (undefined where no owner reads it). */
  get load(): EngineLoadScraper | undefined {
    return this.owner?.load
  }

  /** Publishes a change of the host set to what the picks read (and, in the owner, to the router and the other processes). */
  abstract sync(): void
  /** Applies a new config (reload); returns the instances removed, for the caller to close once drained. */
  abstract update(config: Config, ep: EndpointConfig): Instance[]
  /** Counts how one try on the instance ended (passive outlier detection, decided by the owner). */
  abstract recordTry(inst: Instance, result: TryResult): void
  /** Traffic proved the instance unreachable: out of this process's rotation now, back when the owner's probes pass. */
  abstract markDown(inst: Instance, reason: string): void

  /** Reads the owner's latest membership, where another process owns it; true when that changed the host set. */
  protected refresh(): boolean {
    return false
  }

  /** Instances known beside the host set (those joining), counted by role. */
  protected pending(): Iterable<Instance> {
    return []
  }

  /** The instance lists whose entries carry KV-event publisher addresses. */
  protected entries(): Iterable<readonly HostEntry[]> {
    return [this.#epConfig.instances]
  }

  /** Takes a reloaded configuration for this view's own reads (routing, health interval, exact view). */
  protected configure(config: Config, ep: EndpointConfig): void {
    this.#config = config
    this.#epConfig = ep
    this.routing = endpointRouting(config, ep)
  }

  /**
   * Instances by role: the members and those joining (waiting for their first probe), so that
   * a fleet discovered at once is not one lone leg for the moment its instances join one by one.
   */
  roleCounts(): RoleCounts {
    return roleCounts([...this.instances.values(), ...this.pending()])
  }

  /** How requests run over prefill and decode instances here: the endpoint's setting, else the top-level one. */
  get disaggregation(): DisaggregationConfig {
    return this.#epConfig.disaggregation ?? this.#config.disaggregation
  }

  #exactView(config: Config, ep: EndpointConfig): ExactView | undefined {
    const kv = ep.kvEvents ?? config.kvEvents
    if (kv === undefined) return undefined
    if (!strategyInfo(this.routing.strategy).exactView) {
      const by = STRATEGY_INFO.filter((s) => s.exactView).map((s) => s.name).join(', ')
      this.log.warn({ strategy: this.routing.strategy }, `kvEvents: only ${by} routes by the exact view; the events are read for /admin/instances and /admin/route only`)
    }
    const router = this.router
    return new ExactView({ name: ep.name, router, blockSize: () => router.params.exactBlockSize }, kv, this.log)
  }

  /**
   * A reload changed where events come from, or the block size they are hashed in: the views
   * start over (the old hashes would never match again).
   */
  protected reloadExact(config: Config, ep: EndpointConfig, blockSize: number): void {
    const kv = ep.kvEvents ?? config.kvEvents
    const same = JSON.stringify(kv) === JSON.stringify(this.exact?.config) && blockSize === this.router.params.exactBlockSize
    if (same) return
    const old = this.exact
    if (old !== undefined) {
      for (const id of old.ids()) this.router.exact.clear(id)
      void old.close()
    }
    this.exact = this.#exactView(config, ep)
    this.syncExact()
  }

  /** Whether `model` is a LoRA adapter here (its blocks are keyed by its name). */
  isAdapter(model: string | undefined): boolean {
    return this.hosts.isAdapter(model)
  }

  /** The exact view follows the instances in rotation: one that leaves drops its view, one that comes back starts over. */
  syncExact(): void {
    if (this.exact === undefined) return
    // Publisher addresses an instance's own entry in the configuration gives (read here too in
    // a cluster worker, whose instance list comes from the primary without them).
    const own = new Map<string, HostEntry['kvEvents']>()
    for (const list of this.entries()) for (const i of list) if (i.kvEvents !== undefined) own.set(i.url.replace(/\/+$/, ''), i.kvEvents)
    this.exact.sync(this.healthy().map((i) => ({ id: i.id, url: i.id, kvEvents: own.get(i.id) })))
  }

  /** Instances the router may choose: healthy and not ejected, as of the last sync(). */
  healthy(): readonly Instance[] {
    return this.hosts.healthy()
  }

  /**
   * Whether some instance plays only one leg (prefill or decode): requests then run on instances
   * that decode, and may take a prefill leg on one that prefills (src/schedule/).
   */
  get disaggregated(): boolean {
    return this.hosts.disaggregated
  }

  /** Instances in rotation playing `leg` (any instance for undefined). */
  healthyFor(leg: Leg | undefined): readonly Instance[] {
    return this.hosts.healthyFor(leg)
  }

  get closed(): boolean {
    return this.#closed
  }

  /**
   * Chooses an instance; `avoid` holds a retry's earlier tries, whose instances are skipped. In a
   * disaggregated endpoint the pick is among the instances playing `leg`, by default those that
   * decode (a whole request is generated where it is decoded). `alternates`: rank that many next
   * choices too (Lease.alternates), without leases.
   */
  pick(key: Uint8Array | string, tenant: string | undefined, model: string | undefined, anchor?: number, avoid?: readonly Lease[], exact?: ExactTokens, leg?: Leg, alternates?: number): Pick {
    try {
      return this.#pick(key, tenant, model, anchor, avoid, exact, leg, alternates)
    } catch (err) {
      // Another process owns the fleet: before turning the request away, this one reads the
      // owner's latest record (it reads it on a timer otherwise), and tries once more if it moved.
      if (!(err instanceof RequestError) || !this.refresh()) throw err
      return this.#pick(key, tenant, model, anchor, avoid, exact, leg, alternates)
    }
  }

  #pick(key: Uint8Array | string, tenant: string | undefined, model: string | undefined, anchor?: number, avoid?: readonly Lease[], exact?: ExactTokens, leg?: Leg, alternates?: number): Pick {
    const retryAfter = Math.max(1, Math.ceil(this.#config.health.intervalMs / 1000))
    if (this.healthy().length === 0) throw noHealthyInstance(this.name, retryAfter)
    const on: Leg | undefined = this.disaggregated ? (leg ?? 'decode') : undefined
    if (on !== undefined && this.healthyFor(on).length === 0) throw noLegInstance(this.name, on, model, retryAfter)
    let group: RouterGroup | undefined
    if (model !== undefined) {
      const g = this.hosts.groupOf(model, on, this.#groupId)
      if (g === MODEL_DOWN) throw on === undefined ? noHealthyInstance(this.name, retryAfter) : noLegInstance(this.name, on, model, retryAfter)
      if (g === MODEL_UNKNOWN) throw new RequestError('model_not_found', `The model '${echo(model)}' does not exist on endpoint '${this.name}'.`, 404)
      if (g === LEG_MISSING) throw legMissing(this.name, on!, model)
      group = g
    } else if (on !== undefined) {
      const name = legGroup(on)
      group = { name, id: this.router.groupId(name) }
    }
    let skipped: Lease[] | undefined
    for (;;) {
      let lease: Lease
      try {
        lease = this.router.pickWith(key, tenant, group?.name, group?.id, anchor, skipped === undefined ? avoid : [...(avoid ?? []), ...skipped], exact, undefined, alternates)
      } catch (err) {
        if (err instanceof NoInstanceError) throw noHealthyInstance(this.name, 1)
        throw err
      }
      // In one process the ring and this map change together. With a remote owner the ring
      // may be newer than the record this process last read (an instance added, or back in
      // rotation): the owner writes the record first, so reading it now settles it.
      let instance = this.instances.get(lease.instance)
      if (instance?.inRotation !== true && this.refresh()) instance = this.instances.get(lease.instance)
      if (instance?.inRotation === true) {
        instance.requests++
        return { lease, instance }
      }
      // Out of this process's rotation while the shared ring still lists it (marked down here,
      // before the owner takes it out), or gone from the record before the ring: picked again
      // without it.
      lease.release()
      ;(skipped ??= []).push(lease)
      if (skipped.length >= MAX_REPICKS) throw noHealthyInstance(this.name, 1)
    }
  }

  /** Models served here: base models and adapters (with their parent), for GET /v1/models. */
  models(): { id: string; parent: string | undefined }[] {
    this.refresh()
    return this.hosts.models()
  }

  /** Closes the view: its exact view, its instances' pools (and `others`, the owner's), then the router. */
  protected async closeView(others: Iterable<Instance> = []): Promise<void> {
    this.#closed = true
    await this.exact?.close()
    await Promise.all([...this.instances.values(), ...others].map((i) => i.close()))
    this.router.close()
  }

  abstract close(): Promise<void>
}

/** No instance playing `leg` is in rotation (for the model, when one is named). */
function noLegInstance(endpoint: string, leg: Leg, model: string | undefined, retryAfterSeconds: number): RequestError {
  const what = model === undefined ? '' : ` for model '${echo(model)}'`
  return new RequestError(`no_${leg}_instance`, `no healthy ${leg} instance${what} on endpoint '${endpoint}'`, 503, { details: { endpoint, leg, retryAfterSeconds } })
}

/** The model is served on the endpoint, but by no instance playing `leg`: a configuration to fix, not a passing outage. */
function legMissing(endpoint: string, leg: Leg, model: string): RequestError {
  return new RequestError(
    `no_${leg}_instance`,
    `the model '${echo(model)}' is served on endpoint '${endpoint}' by no instance with the ${leg} role${leg === 'decode' ? ' (prefill instances do not generate answers; give some instances role decode or both)' : ''}`,
    503,
    { details: { endpoint, leg } },
  )
}
