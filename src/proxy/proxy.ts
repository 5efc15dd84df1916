// The running router: endpoints built from config, the front server, the admin server,
// and reload. Everything per request is in handler.ts.
import { tokenizerFromConfig } from './tokenizer-config.js'
import type { RequestTokenizer } from '../tokens/index.js'
import type { AddressInfo } from 'node:net'
import type { Logger } from 'pino'
import { ConfigError, type Config } from '../config/config.js'
import { EndpointDiscovery } from '../fleet/discovery/endpoint-discovery.js'
import { requireSourcePackages } from '../fleet/discovery/create.js'
import { closeWhenDrained, drainThen } from '../fleet/drain.js'
import { Endpoint, probeToken, type EndpointEvents } from '../fleet/endpoint.js'
import { RouterMetrics } from '../metrics/router-metrics.js'
import { defaultReplicaId } from '../fleet/share/replica-id.js'
import { registerShareLoadMetrics } from '../fleet/share/metrics.js'
import { registerTokenizerMetrics } from '../tokens/metrics.js'
import { logFallbacks } from '../tokens/fallback-log.js'
import type { ShareLoad } from '../fleet/share/share-load.js'
import type { SharedLoadSink } from '../fleet/share/sink.js'
import { listenAdmin, type AdminServer } from './admin.js'
import { DecisionRing } from './decisions.js'
import { routerLogger } from './logger.js'
import { SHUTDOWN, type ClientState } from './forward.js'
import { handle, type ProxyCore } from './handler.js'
import { listenFront, type FrontServer } from './server.js'
import { preconnect } from './preconnect.js'
import { warmUp } from './warm.js'
import { PrefillPods } from './pd/prefill-pods.js'

/** Of a drain's timeout, what is kept at its end for the requests ended then to write their answers. */
const SETTLE_MS = 100

export interface ProxyOptions {
  /** Re-reads the configuration for a reload (SIGHUP, POST /admin/reload). */
  reloadConfig?: () => Config
  logger?: Logger
  /** Run one round of health and model probes before accepting traffic (default true). */
  probeFirst?: boolean
  /**
   * Register the process's own metrics (heap, GC, event-loop lag) in this server's registry
   * (default true). Off for a second server in the process: they would be measured twice.
   */
  processMetrics?: boolean
  /** Ports of its own even in a node:cluster worker, not shared through the primary (a throwaway server). */
  exclusive?: boolean
  /**
   * Its part when several processes serve one front port (node:cluster). 'primary': probes,
   * discovery and the admin port, no front port. 'worker': the front port only, its fleet
   * given by the primary through `endpointEvents.remote`. Unset: one process does it all.
   */
  role?: 'primary' | 'worker'
  /** Added to every endpoint's events: how its router is made, who publishes its membership. */
  endpointEvents?: Pick<EndpointEvents, 'router' | 'onSync' | 'remote'>
  /** After a reload has taken effect here (a primary passes it on to its workers). */
  onReload?(config: Config): void
  /** What GET /metrics answers (default: this process's registry). */
  metricsText?(): Promise<string>
  /**
   * With shareLoad: where the other replicas' queued prefill goes, per endpoint and instance
   * (default: each endpoint's router, counted with the engines' load; /admin/replicas shows it too).
   */
  shareLoadSink?: SharedLoadSink
  /**
   * Called the moment the front port listens, before any request on it is handled (the
   * admin port is up by then): where serve prints its banner.
   */
  onListening?(p: ProxyServer): void
  /**
   * A cluster worker: requests that arrive are held, not handled, until serveHeld() (the
   * primary says so once its banner is out).
   */
  holdRequests?: boolean
  /** The clock the drain waits on (default: the real one); a test's counts the drain's waits. */
  drainClock?: DrainClock
}

export interface DrainClock {
  now(): number
  sleep(ms: number): Promise<void>
}

export interface ReloadResult {
  endpoints: string[]
  /** Keys that changed but only take effect on restart. */
  restartRequired: string[]
}

export class ProxyServer implements ProxyCore {
  config: Config
  readonly metrics: RouterMetrics
  readonly log: Logger
  readonly traffic = { active: 0, retrying: 0 }
  readonly requests = new Set<ClientState>()
  readonly decisions = new DecisionRing()
  /** As a decode pod's sidecar: the prefill pods the endpoint picker names (sidecar.enabled). */
  readonly prefillPods: PrefillPods | undefined
  draining = false
  #shutdown: Promise<void> | undefined
  /** Cuts the drain's waits short when close() is called during it. */
  #wake: (() => void) | undefined
  #closing = false
  #endpoints = new Map<string, Endpoint>()
  #discovery = new Map<string, EndpointDiscovery>()
  #front: FrontServer | undefined
  #admin: AdminServer | undefined
  /** Requests waiting for serveHeld() (holdRequests). */
  #held: (() => void)[] | undefined
  #opts: ProxyOptions
  /** The exact view's tokenizer (config.tokenizer), shared by the endpoints. */
  readonly #tokenizer: RequestTokenizer | undefined
  /** Stops the tokenizer's fallback summaries in the log. */
  #stopFallbackLog: (() => void) | undefined
  /** This replica's id (config.replicaId, or one made at start). */
  readonly replicaId: string
  /** Queued prefill shared with the other replicas (config.shareLoad), in the process that owns the fleet. */
  #share: ShareLoad | undefined

  private constructor(config: Config, opts: ProxyOptions, tokenizer: RequestTokenizer | undefined) {
    this.config = config
    this.#opts = opts
    this.#held = opts.holdRequests === true ? [] : undefined
    this.#tokenizer = tokenizer
    this.log = opts.logger ?? routerLogger(config.log)
    // A worker's instances and in-flight counters mirror the primary's, whose gauges report them.
    this.metrics = new RouterMetrics(
      () => this.#endpoints.values(),
      () => this.#front,
      { processMetrics: opts.processMetrics, fleet: opts.role !== 'worker' },
    )
    this.replicaId = config.replicaId ?? defaultReplicaId()
    if (this.#shares()) registerShareLoadMetrics(() => this.#share, [this.metrics.registry])
    if (tokenizer !== undefined) {
      registerTokenizerMetrics(tokenizer, [this.metrics.registry])
      this.#stopFallbackLog = logFallbacks(tokenizer, this.log)
    }
    for (const ep of config.endpoints) this.#endpoints.set(ep.name, new Endpoint(config, ep, this.#endpointEvents()))
    if (config.sidecar.enabled) {
      this.prefillPods = new PrefillPods(config.sidecar.allow, config.upstream)
      if (this.prefillPods.allow.any && opts.role !== 'worker') {
        this.log.warn("sidecar: any prefill pod the x-prefiller-host-port header names is sent the request's prefill leg; restrict them with sidecar.allow (--sidecar-allow), or make sure only the endpoint picker can set the header")
      }
    }
  }

  /**
   * Whether this process publishes and hears the replicas' queued prefill: one process, or a
   * cluster's primary, which reads every worker's leases on the shared routing state (workers
   * never do: one process per host speaks for all of them).
   */
  #shares(): boolean {
    return this.config.shareLoad !== undefined && this.#opts.role !== 'worker'
  }

  /** The sharing of queued prefill between replicas, when configured (in a cluster, the primary's). */
  get shareLoad(): ShareLoad | undefined {
    return this.#share
  }

  #endpointEvents() {
    return {
      log: this.log,
      onEjection: (i: { id: string }, reason: string) => this.metrics.ejections.inc({ instance: i.id, reason }),
      ...(this.#tokenizer !== undefined && { tokenizer: this.#tokenizer }),
      ...this.#opts.endpointEvents,
    }
  }

  static async start(config: Config, opts: ProxyOptions = {}): Promise<ProxyServer> {
    if (config.endpoints.length === 0) throw new ConfigError('no endpoints configured')
    for (const ep of config.endpoints) requireSourcePackages(ep.discovery ?? [])
    const p = new ProxyServer(config, opts, await tokenizerFromConfig(config))
    const probes = opts.role !== 'worker'
    try {
      if (probes && opts.probeFirst !== false) await Promise.all([...p.#endpoints.values()].map((e) => e.probe()))
      if (probes) for (const ep of p.#endpoints.values()) ep.startProbes()
      // Never waits for Redis: its connections are made in the background, and made again.
      if (p.#shares()) p.#share = await p.#startShare(config)
      // Discovered instances are there before the first request, unless a source is slow to answer.
      const discovered = p.#applyDiscovery(config)
      if (opts.probeFirst !== false) await discovered
      if (opts.role !== 'primary') await p.#warmUp()
      // The admin port first: once the front listens, nothing more is awaited before onListening.
      if (opts.role !== 'worker') p.#admin = await listenAdmin(p, config.admin, opts.exclusive)
      if (opts.role !== 'primary') {
        p.#front = await listenFront(config, p.#frontHandler(), opts.exclusive)
        opts.onListening?.(p)
      }
    } catch (err) {
      await p.close()
      throw err
    }
    return p
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
      sink: this.#opts.shareLoadSink ?? { setSharedPrefill: (endpoint, instance, blocks) => void this.#endpoints.get(endpoint)?.setSharedPrefill(instance, blocks) },
    })
  }

  #frontHandler(): Parameters<typeof listenFront>[1] {
    if (this.#opts.role !== 'worker') return (req, res) => void handle(this, req, res)
    // Which process answered: with several serving one port, the only way a client can tell.
    const pid = String(process.pid)
    const serve: Parameters<typeof listenFront>[1] = (req, res) => {
      if (this.config.debugHeaders) (res as typeof res & { setHeader(name: string, value: string): unknown }).setHeader('x-prefix-router-worker', pid)
      void handle(this, req, res)
    }
    return (req, res) => (this.#held !== undefined ? void this.#held.push(() => serve(req, res)) : serve(req, res))
  }

  /** Handles the requests held since the port opened (holdRequests), and every later one at once. */
  serveHeld(): void {
    const held = this.#held
    this.#held = undefined
    for (const next of held ?? []) next()
  }

  /** The text GET /metrics on the admin port answers. */
  metricsText(): Promise<string> {
    return this.#opts.metricsText?.() ?? this.metrics.registry.metrics()
  }

  /** Before the port opens, so that neither traffic nor /health meets a process still in the interpreter. */
  async #warmUp(): Promise<void> {
    const { requests, timeoutMs, connections } = this.config.warmup
    if (requests > 0) {
      const r = await warmUp(this.config, requests, timeoutMs, (config, logger) => ProxyServer.start(config, { logger, processMetrics: false, exclusive: true }))
      const line = { requests: r.requests, errors: r.errors, ms: Math.round(r.ms), timedOut: r.timedOut, failure: r.failure }
      if (r.errors > 0 || r.failure !== undefined) this.log.warn(line, 'warm-up incomplete: some of it failed; starting anyway')
      else this.log.info(line, 'warmed up')
    }
    // Last, right before the port opens: an instance closes idle connections after its own
    // keep-alive time (uvicorn's is 5 s), which a long warm-up could outlast.
    if (connections > 0) {
      const { path, timeoutMs: probeMs } = this.config.health
      const c = await preconnect(this.#endpoints.values(), Math.min(connections, this.config.upstream.connections), path, probeMs)
      this.log.debug(c, 'upstream connections opened')
    }
  }

  /** Whether this process handles front requests (and so records their decisions). */
  get routesRequests(): boolean {
    return this.#opts.role !== 'primary'
  }

  get url(): string {
    const a = this.#front!.address
    const host = a.family === 'IPv6' ? `[${a.address}]` : a.address === '0.0.0.0' ? '127.0.0.1' : a.address
    return `${this.#front!.protocol}://${host}:${a.port}`
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
        const ep = new Endpoint(config, epc, this.#endpointEvents())
        this.#endpoints.set(epc.name, ep)
        if (this.#opts.role !== 'worker') {
          ep.startProbes()
          void ep.probe()
        }
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
      // A worker's discovered instances come from its primary.
      if (ep === undefined || this.#closing || this.#opts.role === 'worker') continue
      let d = this.#discovery.get(epc.name)
      if (d === undefined && (epc.discovery?.length ?? 0) === 0) continue
      if (d === undefined) this.#discovery.set(epc.name, (d = new EndpointDiscovery(ep, this.log)))
      started.push(d.apply(epc.discovery ?? []))
    }
    return Promise.all(started).then(() => undefined)
  }

  /**
   * Graceful shutdown, as a load balancer in front expects: /health and /ping answer 503 at
   * once; connections are still accepted for `delayMs` (the balancer's reaction time) while
   * HTTP/1.1 answers say Connection: close and HTTP/2 sessions get GOAWAY; then the port
   * closes, requests in flight get up to `timeoutMs` to finish, and what is left is ended (an
   * event stream with an error event saying so) and logged as `shutdown`.
   */
  shutdown(opts: { delayMs: number; timeoutMs: number } = this.config.drain): Promise<void> {
    this.#shutdown ??= this.#drain(opts)
    return this.#shutdown
  }

  async #drain({ delayMs, timeoutMs }: { delayMs: number; timeoutMs: number }): Promise<void> {
    const now = () => this.#opts.drainClock?.now() ?? Date.now()
    // The drain is over by then: ending what is left is counted in the timeout, not after it.
    const end = now() + delayMs + timeoutMs
    this.draining = true
    // Held requests are answered as any other during a drain, not left waiting.
    this.serveHeld()
    const front = this.#front
    this.log.info({ delayMs, timeoutMs, inFlight: this.requests.size, connections: front?.openConnections() }, 'draining: /health answers 503')
    front?.beginDrain()
    await this.#sleep(delayMs)
    if (this.#closing) return
    await front?.stopAccepting()
    // What still runs this long before the end is ended, so that its answer (an error event)
    // is written inside the timeout.
    const endAt = end - Math.min(SETTLE_MS, Math.floor(timeoutMs / 4))
    while (this.requests.size > 0 && now() < endAt && !this.#closing) await this.#sleep(Math.min(100, Math.max(1, endAt - now())))
    if (this.#closing) return
    if (this.requests.size > 0) {
      this.log.warn({ inFlight: this.requests.size }, 'drain timeout: ending the requests still in flight')
      for (const c of this.requests) {
        c.shutdown = true
        c.abort?.(SHUTDOWN)
      }
      // Each ends in a few event-loop turns: its upstream is aborted and its answer finished.
      for (let i = 0; i < 3 && this.requests.size > 0; i++) await new Promise((r) => setImmediate(r))
      while (this.requests.size > 0 && now() < end && !this.#closing) await this.#sleep(Math.min(10, Math.max(1, end - now())))
    }
    front?.destroyAll()
    await this.close()
  }

  #sleep(ms: number): Promise<void> {
    return new Promise<void>((resolve) => {
      const clock = this.#opts.drainClock
      if (clock !== undefined) {
        this.#wake = resolve
        return void clock.sleep(ms).then(resolve)
      }
      const t = setTimeout(() => resolve(), ms)
      this.#wake = () => {
        clearTimeout(t)
        resolve()
      }
    })
  }

  async close(): Promise<void> {
    this.#closing = true
    this.#wake?.()
    await this.#front?.close()
    await this.#admin?.close()
    // Before the routers close: the goodbye tells the others to drop this replica's figures now.
    await this.#share?.close()
    await Promise.all([...this.#discovery.values()].map((d) => d.stop()))
    this.#discovery.clear()
    await Promise.all([...this.#endpoints.values()].map((e) => e.close()))
    this.#endpoints.clear()
    this.#stopFallbackLog?.()
    await this.#tokenizer?.close()
    await this.prefillPods?.close()
  }
}
