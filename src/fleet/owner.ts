// The one writer of an endpoint's membership and health, in the process that owns the fleet
// (one process, or a `--workers` primary): it merges the configured instances with what
// discovery reports, lets new ones join after their first probe, keeps the last ones serving
// while none of their replacements is healthy, probes, ejects on passive signals, reads the
// engines' load, and publishes each change to the host set, the router and the other processes.
import type { Logger } from 'pino'
import { endpointRouting, type Config, type EndpointConfig, type RoutingConfig } from '../config/config.js'
import type { Router } from '../core/router.js'
import { defaultThreshold, type RouterOptions, type RoutingParams } from '../core/options.js'
import { closeWhenDrained } from './drain.js'
import type { EndpointEvents } from './endpoint-events.js'
import type { DisaggregationConfig } from '../config/disaggregation.js'
import { hostId, type DiscoveryTarget, type HostEntry } from './host-entry.js'
import type { HostSet } from './host-set.js'
import { Instance } from './instance.js'
import { maxEjected, type TryResult } from './outlier.js'
import { instanceUrl } from './probe.js'
import { ProbeToken } from './probe-auth.js'
import { Prober } from './prober.js'
import { EngineLoadScraper } from './load/scraper.js'
import { LoadBeyondOwn } from './load/beyond.js'
import { scrapes, staleAfter, type EngineLoadConfig } from '../config/engine-load.js'
import { ANY_MODEL, groupsOf } from './groups.js'
import { RoleWatch, type RoleCounts } from './roles.js'

/** What the owner writes besides the host set: the view over it in this process. */
export interface OwnedView {
  readonly name: string
  readonly router: Router
  readonly instances: Map<string, Instance>
  /** The view's exact view follows the instances in rotation. */
  syncExact(): void
  roleCounts(): RoleCounts
  readonly disaggregation: DisaggregationConfig
}

export class FleetOwner implements DiscoveryTarget {
  readonly name: string
  #config: Config
  #routing: RoutingConfig
  readonly #hosts: HostSet
  readonly #log: Logger
  readonly #events: EndpointEvents
  #view!: OwnedView
  #beyond!: LoadBeyondOwn
  #membership = ''
  /** Instances the configuration lists, and each discovery source's latest list. */
  #static: HostEntry[]
  #discovered = new Map<string, HostEntry[]>()
  /** Discovered instances waiting for their first probe before they take traffic. */
  #joining = new Map<string, Instance>()
  /** Each joining instance's first probe: a list naming it again waits for the same one. */
  #joins = new WeakMap<Instance, Promise<void>>()
  /** Removed by discovery, waiting for their requests in flight to finish before closing. */
  #retiring = new Set<Instance>()
  /** No list names them, but they stay in rotation until a listed instance is (#prune). */
  #kept = new Set<string>()
  #keptWarned: string | undefined
  /** The probes' credentials: the endpoint's probeAuth, else the top-level one. */
  #probeToken: ProbeToken | undefined
  /** Warns when the instances' roles leave a leg with no instance to play it. */
  readonly #roles: RoleWatch
  readonly #prober: Prober
  /**
   * Load from the engines (engineLoad): each instance's /metrics read for its requests running
   * and waiting, handed to the router.
   */
  load: EngineLoadScraper | undefined

  constructor(config: Config, ep: EndpointConfig, hosts: HostSet, log: Logger, events: EndpointEvents) {
    this.name = ep.name
    this.#config = config
    this.#routing = endpointRouting(config, ep)
    this.#hosts = hosts
    this.#log = log
    this.#events = events
    this.#static = ep.instances
    this.#probeToken = probeToken(config, ep)
    for (const i of this.#static) hosts.instances.set(hostId(i), this.#instance(i))
    hosts.changed()
    this.#roles = new RoleWatch(ep.name, log)
    this.#prober = new Prober(config, log, {
      instances: () => this.#hosts.instances.values(),
      changed: () => this.sync(),
      ejected: (inst, reason) => this.#events.onEjection?.(inst, reason),
    })
  }

  /**
   * The router's first options: a router cannot be empty, so an endpoint whose instances are
   * all still to be discovered starts with a stand-in, never picked (a pick needs a healthy
   * instance) and replaced by the first sync().
   */
  routerOptions(): RouterOptions {
    const members = this.#members()
    return { ...routerParams(this.#routing, this.#config.engineLoad), instances: members.length > 0 ? members : [{ id: '(awaiting discovery)', weight: 1, groups: [ANY_MODEL] }] }
  }

  /** Starts writing to the view built over the router of routerOptions(). */
  attach(view: OwnedView): void {
    this.#view = view
    this.#beyond = new LoadBeyondOwn(view.router)
    this.load = this.#engineLoad(this.#config)
    view.syncExact()
    this.#syncLoad()
    this.#roles.check(view.roleCounts(), view.disaggregation.whenNoPrefill)
  }

  get size(): number {
    return this.#hosts.instances.size
  }

  /** Those joining: listed, waiting for their first probe. */
  joining(): Iterable<Instance> {
    return this.#joining.values()
  }

  /** Every discovery source's latest list. */
  discovered(): Iterable<readonly HostEntry[]> {
    return this.#discovered.values()
  }

  /**
   * The scraper, when this endpoint reads its engines: not with mode off, and with auto only
   * for a strategy that weighs the figure (longest_prefix).
   */
  #engineLoad(config: Config): EngineLoadScraper | undefined {
    const c = config.engineLoad
    if (!scrapes(c, this.#routing.strategy)) return undefined
    return new EngineLoadScraper({ sink: this.#beyond.engineSink(), intervalMs: c.intervalMs, staleAfterMs: staleAfter(c), log: this.#log })
  }

  /** A reload: the scraper starts, stops or takes the new interval. */
  #reloadLoad(config: Config): void {
    if (!scrapes(config.engineLoad, this.#routing.strategy)) {
      const old = this.load
      this.load = undefined
      if (old !== undefined) void old.close()
      return
    }
    if (this.load === undefined) {
      this.load = this.#engineLoad(config)
      this.#syncLoad()
    } else this.load.configure({ intervalMs: config.engineLoad.intervalMs, staleAfterMs: staleAfter(config.engineLoad) })
  }

  /**
   * The other router replicas' queued prefill at `instance` (share-load), counted with the
   * engines' in-flight figure as load beyond this router's own leases. False for an instance
   * the router does not have.
   */
  setSharedPrefill(instance: string, blocks: number): boolean {
    return this.#beyond.setSharedPrefill(instance, blocks)
  }

  /** The scraper follows the instances in rotation: one that leaves stops being read (its figure back to 0). */
  #syncLoad(): void {
    this.load?.sync(this.#hosts.healthy().map((i) => ({ id: i.id, url: instanceUrl(i, '/metrics'), dispatcher: i.probeDispatcher })))
  }

  /**
   * A reload's first half, before the view follows it: the routing parameters and probe
   * credentials. A token that cannot be read throws before anything changes.
   */
  configure(config: Config, ep: EndpointConfig): void {
    const token = probeToken(config, ep)
    this.#config = config
    this.#routing = endpointRouting(config, ep)
    this.#probeToken = token
    for (const i of [...this.#hosts.instances.values(), ...this.#joining.values()]) i.probeToken = token
    this.#prober.configure(config)
    this.#view.router.configure(routerParams(this.#routing, config.engineLoad))
  }

  /** A reload's second half: the scraper, the instance list, the probes. Returns the instances removed, for the caller to close once drained. */
  reload(config: Config, ep: EndpointConfig): Instance[] {
    this.#reloadLoad(config)
    this.#static = ep.instances
    const { removed } = this.#setInstances(false)
    if (this.#prober.running) this.startProbes()
    return removed
  }

  /**
   * A discovery source's current list (undefined: the source was removed). Instances that
   * left are out of routing at once and closed when their requests have finished; new ones
   * take traffic after their first probe (`joined` resolves then). Returns the ids that
   * join or leave the endpoint: an id another source or `instances` still lists stays.
   * While no listed instance is in rotation, the ones that left stay (see #prune).
   */
  setDiscovered(source: string, list: HostEntry[] | undefined): { added: string[]; removed: string[]; joined: Promise<void> } {
    if (list === undefined) this.#discovered.delete(source)
    else this.#discovered.set(source, list)
    const wanted = this.#wanted()
    const leaving = [...this.#hosts.instances.keys(), ...this.#joining.keys()].filter((id) => !wanted.has(id))
    const { added, removed, joined } = this.#setInstances(true)
    this.#retire(removed)
    void joined.then(() => {
      if (this.#prober.closed || this.#kept.size === 0) return
      const waitingFor = [...this.#wanted().keys()].filter((id) => this.#hosts.instances.get(id)?.inRotation !== true)
      const kept = [...this.#kept].sort()
      // A source answering the same list every interval (DNS) warns once, not every time.
      const key = JSON.stringify([kept, waitingFor])
      if (key === this.#keptWarned) return
      this.#keptWarned = key
      this.#log.warn({ kept, waitingFor }, 'discovery: no listed instance is healthy; keeping the instances that left until one is')
    })
    return { added, removed: leaving, joined }
  }

  /** Ids kept in rotation although no list names them any more: see #prune. */
  keptUntilReplaced(id: string): boolean {
    return this.#kept.has(id)
  }

  #retire(removed: Instance[]): void {
    for (const inst of removed) {
      this.#retiring.add(inst)
      void closeWhenDrained(this.#view, inst).finally(() => this.#retiring.delete(inst))
    }
  }

  /**
   * Takes out the instances no list names, but not the last ones serving: while none of
   * the listed instances is in rotation (they are being probed, or failed their probe: a
   * fleet replaced whole, a file cut short naming an address that does not answer), the
   * ones that left stay in rotation, until a listed one is healthy. An empty list empties
   * the endpoint: nothing is meant to replace them.
   */
  #prune(): Instance[] {
    const wanted = this.#wanted()
    const instances = this.#hosts.instances
    const replaced = wanted.size === 0 || [...instances.values()].some((i) => i.inRotation && wanted.has(i.id))
    const removed: Instance[] = []
    for (const set of [instances, this.#joining]) {
      for (const [id, inst] of set) {
        if (wanted.has(id)) continue
        if (!replaced && set === instances) continue
        set.delete(id)
        removed.push(inst)
      }
    }
    const before = this.#kept.size
    this.#kept = new Set([...instances.keys()].filter((id) => !wanted.has(id)))
    if (this.#kept.size === 0) this.#keptWarned = undefined
    if (before > 0 && this.#kept.size === 0 && removed.length > 0) this.#log.info({ removed: removed.map((i) => i.id) }, 'discovery: a listed instance is healthy; the kept instances leave')
    return removed
  }

  /** Static and discovered instances together, by id (the first listing of an id wins). */
  #wanted(): Map<string, HostEntry> {
    const wanted = new Map<string, HostEntry>()
    for (const list of [this.#static, ...this.#discovered.values()]) {
      for (const i of list) {
        const id = hostId(i)
        if (!wanted.has(id)) wanted.set(id, i)
      }
    }
    return wanted
  }

  /** Makes the membership what is wanted (but see #prune); `probeFirst`: new instances join once probed. */
  #setInstances(probeFirst: boolean): { added: string[]; removed: Instance[]; joined: Promise<void> } {
    const wanted = this.#wanted()
    const added: string[] = []
    const joins: Promise<void>[] = []
    for (const [id, i] of wanted) {
      const cur = this.#hosts.instances.get(id) ?? this.#joining.get(id)
      if (cur) {
        cur.weight = i.weight
        cur.declaredModels = i.models
        cur.indexBlocks = i.indexBlocks
        cur.role = i.role
        cur.bootstrapPort = i.bootstrapPort
        // Still joining: this list has joined only once its first probe is done, as the first did.
        const pending = this.#joins.get(cur)
        if (pending !== undefined && this.#joining.get(id) === cur) joins.push(pending)
        continue
      }
      const inst = this.#instance(i)
      added.push(id)
      if (probeFirst) {
        this.#joining.set(id, inst)
        const join = this.#join(inst)
        this.#joins.set(inst, join)
        joins.push(join)
      } else this.#hosts.instances.set(id, inst)
    }
    const removed = this.#prune()
    this.#syncMembers()
    return { added, removed, joined: Promise.all(joins).then(() => undefined) }
  }

  #instance(i: HostEntry): Instance {
    const inst = new Instance(i.url, i.weight, i.models, this.#config.upstream, i.indexBlocks)
    inst.probeToken = this.#probeToken
    inst.role = i.role
    inst.bootstrapPort = i.bootstrapPort
    return inst
  }

  async #join(inst: Instance): Promise<void> {
    await this.#prober.probeOne(inst)
    if (this.#prober.closed || this.#joining.get(inst.id) !== inst) return
    this.#joining.delete(inst.id)
    this.#hosts.instances.set(inst.id, inst)
    this.sync()
  }

  #members() {
    const all = [...this.#hosts.instances.values()]
    const disaggregated = all.some((i) => i.role !== 'both')
    return all
      .filter((i) => i.inRotation)
      .map((i) => {
        const capacity = i.indexCapacity(this.#routing.blockSize)
        return { id: i.id, weight: i.weight, groups: groupsOf(i.knowsModels() ? i.models() : [], i.role, disaggregated), ...(capacity !== undefined && { indexBlocks: capacity }) }
      })
  }

  /**
   * Publishes the healthy instances and their models to the router, if they changed; kept
   * instances leave once a listed one is in rotation (after a probe, a return from ejection).
   */
  sync(): void {
    if (this.#kept.size > 0) this.#retire(this.#prune())
    this.#syncMembers()
  }

  #syncMembers(): void {
    this.#hosts.changed()
    const view = this.#view
    // Before the ring it describes: another process that reads a ring listing an instance finds it in the record.
    this.#events.onSync?.(view)
    this.#roles.check(view.roleCounts(), view.disaggregation.whenNoPrefill)
    const members = this.#members()
    const key = JSON.stringify(members)
    // The scraper follows rotation even when the router keeps its members (none left in rotation).
    if (key === this.#membership || members.length === 0) return this.#syncLoad()
    this.#membership = key
    view.router.setInstances(members, this.#routing.vnodes)
    view.syncExact()
    this.#syncLoad()
  }

  /** Traffic proved the instance unreachable: out of rotation now, back when probes pass. */
  markDown(inst: Instance, reason: string): void {
    this.#prober.changed(inst, inst.health.fail(reason))
    this.sync()
  }

  /**
   * Counts how one try on the instance ended (passive outlier detection); a run of failures
   * ejects it, unless that would take out more of the endpoint than outlier.maxEjectionPercent.
   */
  recordTry(inst: Instance, result: TryResult): void {
    const c = this.#config.outlier
    const reason = inst.outlier.record(result, c)
    const instances = this.#hosts.instances
    if (reason === undefined || !instances.has(inst.id)) return
    const ejected = [...instances.values()].filter((i) => i.outlier.ejected).length
    if (ejected >= maxEjected(instances.size, c.maxEjectionPercent)) {
      this.#log.warn({ instance: inst.id, reason, ejected }, 'instance failing, but not ejected: outlier.maxEjectionPercent reached')
      return
    }
    this.#prober.eject(inst, reason, (i) => instances.has(i.id))
  }

  /** One round of probes: health, models, metrics. Resolves when all have answered. */
  probe(): Promise<void> {
    return this.#prober.probeAll()
  }

  startProbes(): void {
    this.#prober.start()
  }

  stopProbes(): void {
    this.#prober.stop()
  }

  /** Stops probing and reading the engines, and closes the instances only the owner holds (joining, retiring). */
  async close(): Promise<void> {
    this.#prober.close()
    await this.load?.close()
  }

  /** Instances only the owner holds: those joining, and those retiring. */
  held(): Instance[] {
    return [...this.#joining.values(), ...this.#retiring]
  }
}

/** The probe token of an endpoint: its own probeAuth, else the top-level one (read now: throws ConfigError if it cannot be). */
export function probeToken(config: Config, ep: EndpointConfig): ProbeToken | undefined {
  if (ep.probeAuth !== undefined) return new ProbeToken(ep.probeAuth, `endpoints[${ep.name}].probeAuth`)
  return config.probeAuth === undefined ? undefined : new ProbeToken(config.probeAuth)
}

/**
 * The router's parameters from an endpoint's routing config: an unset threshold is the
 * strategy's default, on reload too; `engineLoad.mode` on counts the engines' load in every
 * strategy (engineLoadAll).
 */
function routerParams(r: RoutingConfig, engineLoad: EngineLoadConfig): RoutingParams {
  const { concurrencyThreshold, ...rest } = r
  return { ...rest, concurrencyThreshold: concurrencyThreshold ?? defaultThreshold(r.strategy), engineLoadAll: r.engineLoadAll || engineLoad.mode === 'on' }
}
