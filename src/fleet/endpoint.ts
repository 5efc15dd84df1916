// A named endpoint: its instances, the native router over the healthy ones, and the probes
// that keep health and models current. Models and adapters become router groups, so a
// request for model M is routed among the instances serving M only.
import { pino, type Logger } from 'pino'
import { endpointRouting, type Config, type EndpointConfig, type RoutingConfig } from '../config/config.js'
import { noHealthyInstance, RequestError } from '../core/errors.js'
import { echo } from '../core/echo.js'
import { NoInstanceError, Router, type Lease } from '../core/router.js'
import { defaultThreshold, type RouterOptions, type RoutingParams } from '../core/options.js'
import { STRATEGY_INFO, strategyInfo } from '../core/strategies.js'
import type { InstanceEntry } from './discovery/source.js'
import { closeWhenDrained } from './drain.js'
import type { Transition } from './health.js'
import { Instance } from './instance.js'
import { maxEjected, type EjectionReason, type TryResult } from './outlier.js'
import { METRICS_PROBE_MAX_BYTES } from './cache-metrics.js'
import { instanceUrl, probeHealth, probeMetrics, probeModels, type ModelsProbe } from './probe.js'
import { ProbeToken } from './probe-auth.js'
import { ExactView } from './events/exact-view.js'
import { EngineLoadScraper } from './load/scraper.js'
import { LoadBeyondOwn } from './load/beyond.js'
import { scrapes, staleAfter, type EngineLoadConfig } from '../config/engine-load.js'
import type { RequestTokenizer } from '../tokens/index.js'
import type { ExactTokens } from '../core/router.js'
import { plays, type DisaggregationConfig } from '../config/disaggregation.js'
import { ANY_MODEL, groupName, groupsOf, legGroup, type Leg } from './groups.js'
import { roleCounts, RoleWatch, type RoleCounts } from './roles.js'

export interface EndpointEvents {
  log?: Logger
  onEjection?(instance: Instance, reason: EjectionReason): void
  /** Builds the endpoint's router (default: one of its own, in this process). */
  router?(endpoint: string, options: RouterOptions): Router
  /** After every membership or health change: the process that owns the fleet publishes it. */
  onSync?(ep: Endpoint): void
  /** The fleet is watched by another process (a cluster primary): see RemoteFleet. */
  remote?: RemoteFleet
  /** How requests get their token ids for the exact view (with kvEvents). */
  tokenizer?: RequestTokenizer
}

/**
 * An endpoint whose instances, health and ejections another process decides: it neither
 * probes nor discovers, its instances are set from outside, and the passive signals its
 * traffic gives go to the owner.
 */
export interface RemoteFleet {
  attached(ep: Endpoint): void
  /** Brings the instances up to the owner's latest record; true when that changed them. */
  refresh(ep: Endpoint): boolean
  recordTry(ep: Endpoint, inst: Instance, result: TryResult): void
  markDown(ep: Endpoint, inst: Instance, reason: string): void
}

/** A model some instance serves, none of them in rotation. */
const MODEL_DOWN = 0
/** A model no instance of the endpoint serves. */
const MODEL_UNKNOWN = 1
/** A model the endpoint serves, but no instance playing the leg asked for does. */
const LEG_MISSING = 2
type GroupOrWhyNot = RouterGroup | typeof MODEL_DOWN | typeof MODEL_UNKNOWN | typeof LEG_MISSING
/** Models remembered between syncs: names come from clients, so the map is bounded. */
const MAX_GROUPS = 1024
/** Tries of one pick that named an instance this process does not route to (the router's avoid list holds 16). */
const MAX_REPICKS = 8

/** A router group, with the id the router's pick takes for it (Router._groupId). */
interface RouterGroup {
  name: string
  id: number
}

export interface Pick {
  lease: Lease
  instance: Instance
}

export class Endpoint {
  readonly name: string
  readonly router: Router
  readonly instances = new Map<string, Instance>()
  routing: RoutingConfig
  #config: Config
  /** This endpoint's own configuration (its instances' KV-event addresses, among others). */
  #epConfig: EndpointConfig
  #timers: NodeJS.Timeout[] = []
  #returns = new Set<NodeJS.Timeout>()
  #membership = ''
  #log: Logger
  /** Instances the configuration lists, and each discovery source's latest list. */
  #static: InstanceEntry[]
  #discovered = new Map<string, InstanceEntry[]>()
  /** Discovered instances waiting for their first probe before they take traffic. */
  #joining = new Map<string, Instance>()
  /** Each joining instance's first probe: a list naming it again waits for the same one. */
  #joins = new WeakMap<Instance, Promise<void>>()
  /** Removed by discovery, waiting for their requests in flight to finish before closing. */
  #retiring = new Set<Instance>()
  /** No list names them, but they stay in rotation until a listed instance is (#prune). */
  #kept = new Set<string>()
  #keptWarned: string | undefined
  #closed = false
  #events: EndpointEvents
  // What pick() reads on every request, rebuilt by sync(), where every change of membership,
  // health, ejection and models is published: the instances in rotation, and each requested
  // model's group (or why there is none).
  #healthy: readonly Instance[] | undefined
  #groups = new Map<string, GroupOrWhyNot>()
  /** Some instance plays prefill or decode only: requests may run over two instances (see groups.ts). */
  #disaggregated = false
  /** The exact cache view (kvEvents configured): the instances' own KV-cache events. */
  exact: ExactView | undefined
  /**
   * Load from the engines (engineLoad, in the process that probes): each instance's /metrics
   * read for its requests running and waiting, handed to the router.
   */
  load: EngineLoadScraper | undefined
  /** The load beyond this router's own leases it is given: the engines' (load), the other replicas' (share-load). */
  readonly #beyond: LoadBeyondOwn
  /** Next instance asked for a remote tokenization, in rotation. */
  #tokenizeNext = 0
  /** The probes' credentials: the endpoint's probeAuth, else the top-level one. */
  #probeToken: ProbeToken | undefined
  /** Warns when the instances' roles leave a leg with no instance to play it. */
  #roles: RoleWatch

  constructor(config: Config, ep: EndpointConfig, events: EndpointEvents = {}) {
    this.name = ep.name
    this.#config = config
    this.#events = events
    this.#log = (events.log ?? pino({ level: 'silent' })).child({ endpoint: ep.name })
    this.#epConfig = ep
    this.routing = endpointRouting(config, ep)
    this.#static = events.remote ? [] : ep.instances
    this.#probeToken = probeToken(config, ep)
    for (const i of this.#static) this.instances.set(i.url.replace(/\/+$/, ''), this.#instance(i))
    // A router cannot be empty: an endpoint whose instances are all still to be discovered
    // starts with a stand-in, never picked (pick() needs a healthy instance) and replaced by
    // the first sync().
    const members = this.#members()
    const options = { ...routerParams(this.routing, config.engineLoad), instances: members.length > 0 ? members : [{ id: '(awaiting discovery)', weight: 1, groups: [ANY_MODEL] }] }
    this.router = events.router?.(ep.name, options) ?? new Router(options)
    this.#beyond = new LoadBeyondOwn(this.router)
    this.exact = this.#exactView(config, ep)
    this.load = this.#engineLoad(config)
    events.remote?.attached(this)
    this.#syncExact()
    this.#syncLoad()
    this.#roles = new RoleWatch(ep.name, this.#log)
    if (!events.remote) this.#roles.check(this.roleCounts(), this.disaggregation.whenNoPrefill)
  }

  /**
   * Instances by role: the members and those joining (waiting for their first probe), so that
   * a fleet discovered at once is not one lone leg for the moment its instances join one by one.
   */
  roleCounts(): RoleCounts {
    return roleCounts([...this.instances.values(), ...this.#joining.values()])
  }

  /** How requests run over prefill and decode instances here: the endpoint's setting, else the top-level one. */
  get disaggregation(): DisaggregationConfig {
    return this.#epConfig.disaggregation ?? this.#config.disaggregation
  }

  /**
   * The scraper, when this endpoint reads its engines: not in a cluster worker (the primary
   * reads them once for the host: the counters it writes to are shared), not with mode off,
   * and with auto only for a strategy that weighs the figure (longest_prefix).
   */
  #engineLoad(config: Config): EngineLoadScraper | undefined {
    const c = config.engineLoad
    if (this.#events.remote !== undefined || !scrapes(c, this.routing.strategy)) return undefined
    return new EngineLoadScraper({
      sink: this.#beyond.engineSink(),
      intervalMs: c.intervalMs,
      staleAfterMs: staleAfter(c),
      log: this.#log,
    })
  }

  /** A reload: the scraper starts, stops or takes the new interval. */
  #reloadLoad(config: Config): void {
    const wanted = this.#events.remote === undefined && scrapes(config.engineLoad, this.routing.strategy)
    if (!wanted) {
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
    this.load?.sync(this.healthy().map((i) => ({ id: i.id, url: instanceUrl(i, '/metrics'), dispatcher: i.probeDispatcher })))
  }

  #exactView(config: Config, ep: EndpointConfig): ExactView | undefined {
    const kv = ep.kvEvents ?? config.kvEvents
    if (kv === undefined) return undefined
    if (!strategyInfo(this.routing.strategy).exactView) {
      const by = STRATEGY_INFO.filter((s) => s.exactView).map((s) => s.name).join(', ')
      this.#log.warn({ strategy: this.routing.strategy }, `kvEvents: only ${by} routes by the exact view; the events are read for /admin/instances and /admin/route only`)
    }
    const router = this.router
    return new ExactView({ name: ep.name, router, blockSize: () => router.params.exactBlockSize }, kv, this.#log)
  }

  /**
   * A reload changed where events come from, or the block size they are hashed in: the views
   * start over (the old hashes would never match again).
   */
  #reloadExact(config: Config, ep: EndpointConfig, blockSize: number): void {
    const kv = ep.kvEvents ?? config.kvEvents
    const same = JSON.stringify(kv) === JSON.stringify(this.exact?.config) && blockSize === this.router.params.exactBlockSize
    if (same) return
    const old = this.exact
    if (old !== undefined) {
      for (const id of old.ids()) this.router.exactClear(id)
      void old.close()
    }
    this.exact = this.#exactView(config, ep)
    this.#syncExact()
  }

  /** The tokenizer, when this endpoint routes by the exact view. */
  get tokenizer(): RequestTokenizer | undefined {
    return this.exact === undefined || !strategyInfo(this.routing.strategy).exactView ? undefined : this.#events.tokenizer
  }

  /** The instance to ask for a remote tokenization of a request for `model`: healthy ones serving it, in turn. */
  tokenizeTarget(model: string | undefined): string | undefined {
    const h = this.healthy().filter((i) => model === undefined || !i.knowsModels() || i.serves(model))
    if (h.length === 0) return undefined
    return h[this.#tokenizeNext++ % h.length]!.id
  }

  /** Whether `model` is a LoRA adapter here (its blocks are keyed by its name). */
  isAdapter(model: string | undefined): boolean {
    if (model === undefined) return false
    for (const i of this.instances.values()) if (i.parents.get(model) !== undefined) return true
    return false
  }

  /** The exact view follows the instances in rotation: one that leaves drops its view, one that comes back starts over. */
  #syncExact(): void {
    if (this.exact === undefined) return
    // Publisher addresses an instance's own entry in the configuration gives (read here too in
    // a cluster worker, whose instance list comes from the primary without them).
    const own = new Map<string, InstanceEntry['kvEvents']>()
    for (const list of [this.#epConfig.instances, ...this.#discovered.values()]) for (const i of list) if (i.kvEvents !== undefined) own.set(i.url.replace(/\/+$/, ''), i.kvEvents)
    this.exact.sync(this.healthy().map((i) => ({ id: i.id, url: i.id, kvEvents: own.get(i.id) })))
  }

  /** Applies a new config (reload): routing for later picks, instance list, probe intervals. */
  update(config: Config, ep: EndpointConfig): Instance[] {
    // Read first: a token that cannot be read fails the reload before anything changes.
    const token = probeToken(config, ep)
    this.#config = config
    this.#epConfig = ep
    this.routing = endpointRouting(config, ep)
    this.#probeToken = token
    for (const i of [...this.instances.values(), ...this.#joining.values()]) i.probeToken = token
    const remote = this.#events.remote
    const blockSize = this.router.params.exactBlockSize
    // The owner publishes parameters and the instance list to the shared state.
    if (remote) {
      this.#reloadExact(config, ep, blockSize)
      return []
    }
    this.router.configure(routerParams(this.routing, config.engineLoad))
    this.#reloadExact(config, ep, blockSize)
    this.#reloadLoad(config)
    this.#static = ep.instances
    const { removed } = this.#setInstances(false)
    if (this.#timers.length > 0) this.startProbes()
    return removed // the caller closes them once their requests have drained
  }

  /**
   * A discovery source's current list (undefined: the source was removed). Instances that
   * left are out of routing at once and closed when their requests have finished; new ones
   * take traffic after their first probe (`joined` resolves then). Returns the ids that
   * join or leave the endpoint: an id another source or `instances` still lists stays.
   * While no listed instance is in rotation, the ones that left stay (see #prune).
   */
  setDiscovered(source: string, list: InstanceEntry[] | undefined): { added: string[]; removed: string[]; joined: Promise<void> } {
    if (list === undefined) this.#discovered.delete(source)
    else this.#discovered.set(source, list)
    const wanted = this.#wanted()
    const leaving = [...this.instances.keys(), ...this.#joining.keys()].filter((id) => !wanted.has(id))
    const { added, removed, joined } = this.#setInstances(true)
    this.#retire(removed)
    void joined.then(() => {
      if (this.#closed || this.#kept.size === 0) return
      const waitingFor = [...this.#wanted().keys()].filter((id) => this.instances.get(id)?.inRotation !== true)
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
      void closeWhenDrained(this, inst).finally(() => this.#retiring.delete(inst))
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
    const replaced = wanted.size === 0 || [...this.instances.values()].some((i) => i.inRotation && wanted.has(i.id))
    const removed: Instance[] = []
    for (const set of [this.instances, this.#joining]) {
      for (const [id, inst] of set) {
        if (wanted.has(id)) continue
        if (!replaced && set === this.instances) continue
        set.delete(id)
        removed.push(inst)
      }
    }
    const before = this.#kept.size
    this.#kept = new Set([...this.instances.keys()].filter((id) => !wanted.has(id)))
    if (this.#kept.size === 0) this.#keptWarned = undefined
    if (before > 0 && this.#kept.size === 0 && removed.length > 0) this.#log.info({ removed: removed.map((i) => i.id) }, 'discovery: a listed instance is healthy; the kept instances leave')
    return removed
  }

  /** Static and discovered instances together, by id (the first listing of an id wins). */
  #wanted(): Map<string, InstanceEntry> {
    const wanted = new Map<string, InstanceEntry>()
    for (const list of [this.#static, ...this.#discovered.values()]) {
      for (const i of list) {
        const id = i.url.replace(/\/+$/, '')
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
      const cur = this.instances.get(id) ?? this.#joining.get(id)
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
      } else this.instances.set(id, inst)
    }
    const removed = this.#prune()
    this.#syncMembers()
    return { added, removed, joined: Promise.all(joins).then(() => undefined) }
  }

  #instance(i: InstanceEntry): Instance {
    const inst = new Instance(i.url, i.weight, i.models, this.#config.upstream, i.indexBlocks)
    inst.probeToken = this.#probeToken
    inst.role = i.role
    inst.bootstrapPort = i.bootstrapPort
    return inst
  }

  /** What GET /v1/models found: the models taken, a refused probe logged once and shown as the instance's error. */
  #modelsFound(inst: Instance, m: ModelsProbe | undefined): void {
    if (m === undefined) return
    if ('error' in m) {
      if (inst.discoveryError !== m.error) this.#log.warn({ instance: inst.id, reason: m.error }, 'model discovery failed')
      inst.discoveryError = m.error
      return
    }
    if (inst.discoveryError !== undefined) this.#log.info({ instance: inst.id }, 'model discovery works again')
    inst.discoveryError = undefined
    inst.setDiscoveredModels(m)
  }

  async #join(inst: Instance): Promise<void> {
    await this.#probeOne(inst)
    if (this.#closed || this.#joining.get(inst.id) !== inst) return
    this.#joining.delete(inst.id)
    this.instances.set(inst.id, inst)
    this.sync()
  }

  /** Instances the router may choose: healthy and not ejected, as of the last sync(). */
  healthy(): readonly Instance[] {
    return (this.#healthy ??= [...this.instances.values()].filter((i) => i.inRotation))
  }

  /**
   * Whether some instance plays only one leg (prefill or decode): requests then run on instances
   * that decode, and may take a prefill leg on one that prefills (src/schedule/).
   */
  get disaggregated(): boolean {
    return this.#disaggregated
  }

  /** Instances in rotation playing `leg` (any instance for undefined). */
  healthyFor(leg: Leg | undefined): readonly Instance[] {
    const h = this.healthy()
    return leg === undefined ? h : h.filter((i) => plays(i.role, leg))
  }

  /** The router group of a request for `model` on `leg` (undefined: a whole request in an endpoint that does not disaggregate), or why no instance can take it. */
  #groupOf(model: string, leg: Leg | undefined): GroupOrWhyNot {
    const key = groupName(model, leg)
    let g = this.#groups.get(key)
    if (g !== undefined) return g
    const playing = (i: Instance) => leg === undefined || plays(i.role, leg)
    const healthy = this.healthy().filter(playing)
    const all = [...this.instances.values()]
    if (healthy.some((i) => i.serves(model))) g = { name: key, id: this.router._groupId(key) }
    else if (healthy.some((i) => !i.knowsModels())) g = { name: groupName(ANY_MODEL, leg), id: this.router._groupId(groupName(ANY_MODEL, leg)) }
    else if (all.some((i) => playing(i) && i.serves(model))) g = MODEL_DOWN
    else if (leg !== undefined && all.some((i) => i.serves(model) || !i.knowsModels())) g = LEG_MISSING
    else g = MODEL_UNKNOWN
    if (this.#groups.size >= MAX_GROUPS) this.#groups.clear()
    this.#groups.set(key, g)
    return g
  }

  #members() {
    const list = [...this.instances.values()].filter((i) => i.inRotation)
    const disaggregated = [...this.instances.values()].some((i) => i.role !== 'both')
    // Set here too: the constructor builds the router from these groups before any sync.
    this.#disaggregated = disaggregated
    return list.map((i) => {
      const capacity = i.indexCapacity(this.routing.blockSize)
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
    this.#healthy = undefined
    this.#groups.clear()
    this.#disaggregated = [...this.instances.values()].some((i) => i.role !== 'both')
    this.#events.onSync?.(this)
    if (this.#events.remote) return this.#syncExact()
    this.#roles.check(this.roleCounts(), this.disaggregation.whenNoPrefill)
    const members = this.#members()
    const key = JSON.stringify(members)
    // The scraper follows rotation even when the router keeps its members (none left in rotation).
    if (key === this.#membership || members.length === 0) return this.#syncLoad()
    this.#membership = key
    this.router.setInstances(members, this.routing.vnodes)
    this.#syncExact()
    this.#syncLoad()
  }

  /** Traffic proved the instance unreachable: out of rotation now, back when probes pass. */
  markDown(inst: Instance, reason: string): void {
    // Out of this process's picks at once; the owner takes it out everywhere.
    this.#changed(inst, inst.health.fail(reason))
    this.#events.remote?.markDown(this, inst, reason)
    this.sync()
  }

  #changed(inst: Instance, t: Transition): void {
    if (t === 'down') this.#log.warn({ instance: inst.id, reason: inst.lastError }, 'instance down')
    else if (t === 'up') {
      // Down and back up (a restart): the failures that ejected it were its going down, not a
      // fault that outlives it. One that never failed a probe stays ejected for its time.
      const lifted = inst.outlier.ejected
      if (lifted) inst.outlier.restore(Date.now())
      this.#log.info({ instance: inst.id, ...(lifted && { ejectionLifted: true }) }, 'instance up')
    }
  }

  /**
   * Counts how one try on the instance ended (passive outlier detection); a run of failures
   * ejects it, unless that would take out more of the endpoint than outlier.maxEjectionPercent.
   */
  recordTry(inst: Instance, result: TryResult): void {
    if (this.#events.remote) return this.#events.remote.recordTry(this, inst, result)
    const c = this.#config.outlier
    const reason = inst.outlier.record(result, c)
    if (reason === undefined || !this.instances.has(inst.id)) return
    const ejected = [...this.instances.values()].filter((i) => i.outlier.ejected).length
    if (ejected >= maxEjected(this.instances.size, c.maxEjectionPercent)) {
      this.#log.warn({ instance: inst.id, reason, ejected }, 'instance failing, but not ejected: outlier.maxEjectionPercent reached')
      return
    }
    const ms = inst.outlier.eject(Date.now(), c)
    this.#log.warn({ instance: inst.id, reason, ejectionMs: ms, ejections: inst.outlier.ejections }, 'instance ejected')
    this.#events.onEjection?.(inst, reason)
    this.sync()
    // Back by probe once the time is served: a probe that passes returns it to rotation.
    const t = setTimeout(() => {
      this.#returns.delete(t)
      void this.#tryReturn(inst)
    }, ms)
    t.unref()
    this.#returns.add(t)
  }

  async #tryReturn(inst: Instance): Promise<void> {
    if (!this.instances.has(inst.id) || !inst.outlier.ejected) return
    const { health } = this.#config
    const r = await probeHealth(inst, health.path, health.timeoutMs)
    inst.outlier.restore(Date.now())
    if (r.ok) this.#log.info({ instance: inst.id }, 'instance returned after ejection')
    else this.#changed(inst, inst.health.fail(`after ejection: ${r.error ?? 'probe failed'}`))
    this.sync()
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
      if (!(err instanceof RequestError) || this.#events.remote?.refresh(this) !== true) throw err
      return this.#pick(key, tenant, model, anchor, avoid, exact, leg, alternates)
    }
  }

  #pick(key: Uint8Array | string, tenant: string | undefined, model: string | undefined, anchor?: number, avoid?: readonly Lease[], exact?: ExactTokens, leg?: Leg, alternates?: number): Pick {
    const retryAfter = Math.max(1, Math.ceil(this.#config.health.intervalMs / 1000))
    if (this.healthy().length === 0) throw noHealthyInstance(this.name, retryAfter)
    const on: Leg | undefined = this.#disaggregated ? (leg ?? 'decode') : undefined
    if (on !== undefined && this.healthyFor(on).length === 0) throw noLegInstance(this.name, on, model, retryAfter)
    let group: RouterGroup | undefined
    if (model !== undefined) {
      const g = this.#groupOf(model, on)
      if (g === MODEL_DOWN) throw on === undefined ? noHealthyInstance(this.name, retryAfter) : noLegInstance(this.name, on, model, retryAfter)
      if (g === MODEL_UNKNOWN) throw new RequestError('model_not_found', `The model '${echo(model)}' does not exist on endpoint '${this.name}'.`, 404)
      if (g === LEG_MISSING) throw legMissing(this.name, on!, model)
      group = g
    } else if (on !== undefined) {
      const name = legGroup(on)
      group = { name, id: this.router._groupId(name) }
    }
    const remote = this.#events.remote
    let skipped: Lease[] | undefined
    for (;;) {
      let lease: Lease
      try {
        lease = this.router._pickIn(key, tenant, group?.name, group?.id, anchor, skipped === undefined ? avoid : [...(avoid ?? []), ...skipped], exact, undefined, alternates)
      } catch (err) {
        if (err instanceof NoInstanceError) throw noHealthyInstance(this.name, 1)
        throw err
      }
      // In one process the ring and this map change together. With a remote owner the ring
      // may be newer than the record this process last read (an instance added, or back in
      // rotation): the owner writes the record first, so reading it now settles it.
      let instance = this.instances.get(lease.instance)
      if (instance?.inRotation !== true && remote?.refresh(this) === true) instance = this.instances.get(lease.instance)
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

  /** One round of probes: health, models, metrics. Resolves when all have answered. */
  async probe(): Promise<void> {
    await Promise.all([...this.instances.values()].map((inst) => this.#probeOne(inst)))
    if (!this.#closed) this.sync()
  }

  async #probeOne(inst: Instance): Promise<void> {
    const { health, discovery } = this.#config
    const [r, models] = await Promise.all([probeHealth(inst, health.path, health.timeoutMs), probeModels(inst, health.timeoutMs)])
    if (this.#closed) return
    this.#changed(inst, inst.health.probe(r.ok, r.error, health))
    this.#modelsFound(inst, models)
    if (r.ok && discovery.metricsIntervalMs > 0) await this.#probeMetrics(inst)
  }

  /** The cache probe of one instance; a page cut at its bound is counted, and said once per instance. */
  async #probeMetrics(inst: Instance): Promise<void> {
    const problem = await probeMetrics(inst, this.#config.health.timeoutMs)
    if (problem === undefined || this.#closed) return
    if (inst.metricsPagesCut++ === 0) this.#log.warn({ instance: inst.id, maxBytes: METRICS_PROBE_MAX_BYTES }, `metrics probe: ${problem}`)
  }

  startProbes(): void {
    this.stopProbes()
    const { health, discovery } = this.#config
    const every = (ms: number, fn: () => Promise<void>) => {
      if (ms <= 0) return
      const t = setInterval(() => void fn(), ms)
      t.unref()
      this.#timers.push(t)
    }
    // A probe cut short by close() (its connections destroyed) says nothing about the instance.
    const each = (fn: (i: Instance) => Promise<void>) => async () => {
      await Promise.all([...this.instances.values()].map(fn))
      if (!this.#closed) this.sync()
    }
    every(
      health.intervalMs,
      each(async (i) => {
        const r = await probeHealth(i, health.path, health.timeoutMs)
        if (!this.#closed) this.#changed(i, i.health.probe(r.ok, r.error, health))
      }),
    )
    every(
      discovery.modelsIntervalMs,
      each(async (i) => {
        this.#modelsFound(i, await probeModels(i, health.timeoutMs))
      }),
    )
    every(discovery.metricsIntervalMs, each((i) => this.#probeMetrics(i)))
  }

  stopProbes(): void {
    for (const t of this.#timers) clearInterval(t)
    this.#timers = []
  }

  /** Models served here: base models and adapters (with their parent), for GET /v1/models. */
  models(): { id: string; parent: string | undefined }[] {
    this.#events.remote?.refresh(this)
    const out = new Map<string, string | undefined>()
    for (const inst of this.instances.values()) {
      for (const m of inst.models()) if (!out.has(m)) out.set(m, inst.parents.get(m))
    }
    return [...out].map(([id, parent]) => ({ id, parent }))
  }

  async close(): Promise<void> {
    this.#closed = true
    this.stopProbes()
    for (const t of this.#returns) clearTimeout(t)
    this.#returns.clear()
    await this.load?.close()
    await this.exact?.close()
    await Promise.all([...this.instances.values(), ...this.#joining.values(), ...this.#retiring].map((i) => i.close()))
    this.router.close()
  }
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
