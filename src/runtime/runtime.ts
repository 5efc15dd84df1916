// The fleet runtime both fronts stand on: the endpoints built from the configuration, their
// probes and discovery, the sharing of queued prefill between replicas, the exact view's
// tokenizer, reload, and the admin port. serve's HTTP front (src/proxy) and the endpoint
// picker's ext_proc front (src/epp) each start one and speak their own protocol over it; a
// --workers primary runs one with no front at all.
import type { AddressInfo } from 'node:net'
import type { Logger } from 'pino'
import { ConfigError, type Config } from '../config/config.js'
import { EndpointDiscovery } from '../fleet/discovery/endpoint-discovery.js'
import { requireSourcePackages } from '../fleet/discovery/create.js'
import { closeWhenDrained, drainThen } from '../fleet/drain.js'
import type { BuildEndpoint, Endpoint, EndpointEvents } from '../fleet/endpoint.js'
import { localEndpoint } from '../fleet/local-endpoint.js'
import { probeToken } from '../fleet/owner.js'
import { defaultReplicaId } from '../fleet/share/replica-id.js'
import { registerShareLoadMetrics } from '../fleet/share/metrics.js'
import type { ShareLoad } from '../fleet/share/share-load.js'
import type { SharedLoadSink } from '../fleet/share/sink.js'
import { routerLogger } from '../log/logger.js'
import { RouterMetrics } from '../metrics/router-metrics.js'
import { registerTokenizerMetrics } from '../tokens/metrics.js'
import { logFallbacks } from '../tokens/fallback-log.js'
import type { RequestTokenizer } from '../tokens/index.js'
import { RequestKeying } from '../request/keying.js'
import { listenAdmin, type AdminServer } from './admin/admin.js'
import type { AdminView } from './admin/admin-view.js'
import { DecisionRing } from './admin/decisions.js'
import { tokenizerFromConfig } from './tokenizer-config.js'

export interface RuntimeOptions {
  /** Re-reads the configuration for a reload (SIGHUP, POST /admin/reload). */
  reloadConfig?: () => Config
  logger?: Logger
  /** Run one round of health and model probes before the start resolves (default true). */
  probeFirst?: boolean
  /**
   * Register the process's own metrics (heap, GC, event-loop lag) in this runtime's registry
   * (default true). Off for a second one in the process: they would be measured twice.
   */
  processMetrics?: boolean
  /** Ports of its own even in a node:cluster worker, not shared through the primary (a throwaway server). */
  exclusive?: boolean
  /**
   * Who decides the fleet. 'own' (the default): this process probes, discovers, shares queued
   * prefill and opens the admin port. 'mirror': another process does (a --workers worker's
   * fleet comes from its primary through the endpoints `buildEndpoint` makes), and none of that
   * runs here.
   */
  fleet?: 'own' | 'mirror'
  /** Added to every endpoint's events: how its router is made, who publishes its membership. */
  endpointEvents?: Pick<EndpointEvents, 'router' | 'onSync'>
  /** Builds each endpoint's view (default: its owner and its view in this process; a worker's reads the primary's). */
  buildEndpoint?: BuildEndpoint
  /** After a reload has taken effect here (a primary passes it on to its workers). */
  onReload?(config: Config): void
  /** What GET /metrics answers (default: this process's registry). */
  metricsText?(): Promise<string>
  /**
   * With shareLoad: where the other replicas' queued prefill goes, per endpoint and instance
   * (default: each endpoint's router, counted with the engines' load; /admin/replicas shows it too).
   */
  shareLoadSink?: SharedLoadSink
  /** Requests are routed in this process (serve's HTTP front): the status page shows their decisions. */
  routesRequests?: boolean
  /** The front port's connections, for their gauges (none: the gauges stay 0). */
  frontConnections?(): { openConnections(): number; readonly refused: number } | undefined
  /** Once the fleet is up, before the admin port opens: serve's warm-up through its own front. */
  beforeAdmin?(runtime: Runtime): Promise<void>
}

export interface ReloadResult {
  endpoints: string[]
  /** Keys that changed but only take effect on restart. */
  restartRequired: string[]
}

export class Runtime implements AdminView {
  config: Config
  readonly metrics: RouterMetrics
  readonly log: Logger
  /** The last decisions of requests through this process's front, for the status page. */
  readonly decisions = new DecisionRing()
  /** A front is shutting down (set by it): /health and readiness turn the traffic away. */
  draining = false
  /** This replica's id (config.replicaId, or one made at start). */
  readonly replicaId: string
  /** How the fronts turn a request into its key and tokens: the exact view's tokenizer (config.tokenizer) is here. */
  readonly keying: RequestKeying
  #closed: Promise<void> | undefined
  #closing = false
  #endpoints = new Map<string, Endpoint>()
  #discovery = new Map<string, EndpointDiscovery>()
  #admin: AdminServer | undefined
  #opts: RuntimeOptions
  /** Stops the tokenizer's fallback summaries in the log. */
  #stopFallbackLog: (() => void) | undefined
  /** Queued prefill shared with the other replicas (config.shareLoad), in the process that owns the fleet. */
  #share: ShareLoad | undefined

  private constructor(config: Config, opts: RuntimeOptions, tokenizer: RequestTokenizer | undefined) {
    this.config = config
    this.#opts = opts
    this.log = opts.logger ?? routerLogger(config.log)
    // A mirror's instances and in-flight counters are the owner's, whose gauges report them.
    this.metrics = new RouterMetrics(() => this.#endpoints.values(), () => opts.frontConnections?.(), { processMetrics: opts.processMetrics, fleet: this.ownsFleet })
    this.replicaId = config.replicaId ?? defaultReplicaId()
    this.keying = new RequestKeying(tokenizer, this.metrics.tokenize)
    if (this.#shares()) registerShareLoadMetrics(() => this.#share, [this.metrics.registry])
    if (tokenizer !== undefined) {
      registerTokenizerMetrics(tokenizer, [this.metrics.registry])
      this.#stopFallbackLog = logFallbacks(tokenizer, this.log)
    }
    for (const ep of config.endpoints) this.#endpoints.set(ep.name, this.#newEndpoint(config, ep))
  }

  /** This process probes, discovers and opens the admin port (not a --workers worker). */
  get ownsFleet(): boolean {
    return this.#opts.fleet !== 'mirror'
  }

  /**
   * Whether this process publishes and hears the replicas' queued prefill: one that owns its
   * fleet (a cluster's primary reads every worker's leases on the shared routing state; one
   * process per host speaks for all of them).
   */
  #shares(): boolean {
    return this.config.shareLoad !== undefined && this.ownsFleet
  }

  /** The sharing of queued prefill between replicas, when configured (in a cluster, the primary's). */
  get shareLoad(): ShareLoad | undefined {
    return this.#share
  }

  /** Whether a front in this process routes requests (and so records their decisions). */
  get routesRequests(): boolean {
    return this.#opts.routesRequests === true
  }

  #newEndpoint(config: Config, ep: Config['endpoints'][number]): Endpoint {
    return (this.#opts.buildEndpoint ?? localEndpoint)(config, ep, this.#endpointEvents())
  }

  #endpointEvents() {
    return {
      log: this.log,
      onEjection: (i: { id: string }, reason: string) => this.metrics.ejections.inc({ instance: i.id, reason }),
      ...this.#opts.endpointEvents,
    }
  }

  static async start(config: Config, opts: RuntimeOptions = {}): Promise<Runtime> {
    if (config.endpoints.length === 0) throw new ConfigError('no endpoints configured')
    for (const ep of config.endpoints) requireSourcePackages(ep.discovery ?? [])
    const r = new Runtime(config, opts, await tokenizerFromConfig(config))
    try {
      // Only an endpoint's owner probes (a worker's come from its primary).
      if (opts.probeFirst !== false) await Promise.all([...r.#endpoints.values()].map((e) => e.owner?.probe()))
      for (const ep of r.#endpoints.values()) ep.owner?.startProbes()
      // Never waits for Redis: its connections are made in the background, and made again.
      if (r.#shares()) r.#share = await r.#startShare(config)
      // Discovered instances are there before the first request, unless a source is slow to answer.
      const discovered = r.#applyDiscovery(config)
      if (opts.probeFirst !== false) await discovered
      await opts.beforeAdmin?.(r)
      if (r.ownsFleet) r.#admin = await listenAdmin(r, config.admin, opts.exclusive)
    } catch (err) {
      await r.close()
      throw err
    }
    return r
  }

  async #startShare(config: Config): Promise<ShareLoad> {
    const s = config.shareLoad!
    const { ShareLoad } = await import('../fleet/share/share-load.js')
    return ShareLoad.start({
      url: s.url,
      replicaId: this.replicaId,
      intervalMs: s.intervalMs,
      prefix: s.prefix,
      expireMs: s.expireMs,
      endpoints: () => this.#endpoints.values(),
      log: this.log,
      // Into each endpoint's router, with the engines' load (LoadBeyondOwn keeps the two apart).
      sink: this.#opts.shareLoadSink ?? { setSharedPrefill: (endpoint, instance, blocks) => void this.#endpoints.get(endpoint)?.owner?.setSharedPrefill(instance, blocks) },
    })
  }

  /** The text GET /metrics on the admin port answers. */
  metricsText(): Promise<string> {
    return this.#opts.metricsText?.() ?? this.metrics.registry.metrics()
  }

  get adminUrl(): string {
    const a = this.#admin!.address as AddressInfo
    return `http://${a.address === '0.0.0.0' ? '127.0.0.1' : a.address}:${a.port}`
  }

  endpoint(name: string | undefined): Endpoint | undefined {
    if (name === undefined) return this.#endpoints.values().next().value // the first one is the default
    return this.#endpoints.get(name)
  }

  endpoints(): Iterable<Endpoint> {
    return this.#endpoints.values()
  }

  /** Applies a new configuration to later requests; requests in flight keep their leases. */
  reload(next?: Config): ReloadResult {
    let config: Config
    try {
      config = next ?? this.#opts.reloadConfig?.() ?? this.config
      for (const ep of config.endpoints) requireSourcePackages(ep.discovery ?? [])
      // A probe token that cannot be read refuses the reload before any endpoint changes.
      for (const epc of config.endpoints) probeToken(config, epc)
    } catch (err) {
      // Both paths (SIGHUP, POST /admin/reload) land here: the operator sees why in the log.
      this.log.warn({ err: (err as Error).message }, 'reload failed; keeping the running configuration')
      throw err
    }
    const restartRequired: string[] = (['listen', 'admin', 'tls', 'limits', 'upstream', 'workers', 'shareLoad', 'replicaId', 'sidecar'] as const).filter(
      (k) => JSON.stringify(config[k]) !== JSON.stringify(this.config[k]),
    )
    // The logger's destination is made once, at start.
    if (config.log.format !== this.config.log.format) restartRequired.push('log.format')
    const retired: Promise<void>[] = []
    const names = new Set(config.endpoints.map((e) => e.name))
    for (const [name, ep] of this.#endpoints) {
      if (!names.has(name)) {
        this.#endpoints.delete(name)
        void this.#discovery.get(name)?.stop()
        this.#discovery.delete(name)
        retired.push(drainThen(ep, () => ep.close()))
      }
    }
    for (const epc of config.endpoints) {
      const cur = this.#endpoints.get(epc.name)
      if (cur) {
        for (const inst of cur.update(config, epc)) retired.push(closeWhenDrained(cur, inst))
      } else {
        const ep = this.#newEndpoint(config, epc)
        this.#endpoints.set(epc.name, ep)
        ep.owner?.startProbes()
        void ep.owner?.probe()
      }
    }
    this.config = {
      ...config,
      listen: this.config.listen,
      admin: this.config.admin,
      tls: this.config.tls,
      limits: this.config.limits,
      upstream: this.config.upstream,
      workers: this.config.workers,
      shareLoad: this.config.shareLoad,
      replicaId: this.config.replicaId,
      log: { ...config.log, format: this.config.log.format },
    }
    this.log.level = config.log.level
    void this.#applyDiscovery(config)
    this.log.info({ endpoints: [...names], restartRequired }, 'configuration reloaded')
    void Promise.all(retired)
    this.#opts.onReload?.(this.config)
    return { endpoints: [...names], restartRequired }
  }

  /** Starts, stops or keeps each endpoint's discovery sources as the configuration lists them. */
  #applyDiscovery(config: Config): Promise<void> {
    const started: Promise<void>[] = []
    for (const epc of config.endpoints) {
      const ep = this.#endpoints.get(epc.name)
      // Discovery feeds the owner: a mirror's discovered instances come from the process that owns the fleet.
      if (ep?.owner === undefined || this.#closing) continue
      let d = this.#discovery.get(epc.name)
      if (d === undefined && (epc.discovery?.length ?? 0) === 0) continue
      if (d === undefined) this.#discovery.set(epc.name, (d = new EndpointDiscovery(ep.owner, this.log)))
      started.push(d.apply(epc.discovery ?? []))
    }
    return Promise.all(started).then(() => undefined)
  }

  /** Stops everything it started; its front closes its own port first. Once: a second call waits for the first. */
  close(): Promise<void> {
    this.#closing = true
    this.#closed ??= this.#close()
    return this.#closed
  }

  async #close(): Promise<void> {
    await this.#admin?.close()
    // Before the routers close: the goodbye tells the others to drop this replica's figures now.
    await this.#share?.close()
    await Promise.all([...this.#discovery.values()].map((d) => d.stop()))
    this.#discovery.clear()
    await Promise.all([...this.#endpoints.values()].map((e) => e.close()))
    this.#endpoints.clear()
    this.#stopFallbackLog?.()
    await this.keying.tokenizer?.close()
  }
}
