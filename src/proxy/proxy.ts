// serve's HTTP front over the fleet runtime (src/runtime): the front port, its warm-up, the
// requests in flight and their drain. Everything per request is in handler.ts.
import type { Logger } from 'pino'
import type { Config } from '../config/config.js'
import type { Endpoint } from '../fleet/endpoint.js'
import type { ShareLoad } from '../fleet/share/share-load.js'
import type { RouterMetrics } from '../metrics/router-metrics.js'
import type { RequestKeying } from '../request/keying.js'
import type { DecisionRing } from '../runtime/admin/decisions.js'
import { Runtime, type ReloadResult, type RuntimeOptions } from '../runtime/runtime.js'
import { SHUTDOWN, type ClientState } from './forward.js'
import { handle, type ProxyCore } from './handler.js'
import { listenFront, type FrontServer } from './server.js'
import { preconnect } from './preconnect.js'
import { warmUp } from './warm.js'
import { PrefillPods } from './pd/prefill-pods.js'

export type { ReloadResult } from '../runtime/runtime.js'

/** Of a drain's timeout, what is kept at its end for the requests ended then to write their answers. */
const SETTLE_MS = 100

export interface ProxyOptions extends Omit<RuntimeOptions, 'routesRequests' | 'frontConnections' | 'beforeAdmin'> {
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

export class ProxyServer implements ProxyCore {
  readonly traffic = { active: 0, retrying: 0 }
  readonly requests = new Set<ClientState>()
  /** As a decode pod's sidecar: the prefill pods the endpoint picker names (sidecar.enabled). */
  readonly prefillPods: PrefillPods | undefined
  #shutdown: Promise<void> | undefined
  /** Cuts the drain's waits short when close() is called during it. */
  #wake: (() => void) | undefined
  #closing = false
  #front: FrontServer | undefined
  /** Requests waiting for serveHeld() (holdRequests). */
  #held: (() => void)[] | undefined
  #opts: ProxyOptions

  private constructor(
    readonly runtime: Runtime,
    opts: ProxyOptions,
  ) {
    this.#opts = opts
    this.#held = opts.holdRequests === true ? [] : undefined
    const config = runtime.config
    if (config.sidecar.enabled) {
      this.prefillPods = new PrefillPods(config.sidecar.allow, config.upstream)
      if (this.prefillPods.allow.any && runtime.ownsFleet) {
        this.runtime.log.warn("sidecar: any prefill pod the x-prefiller-host-port header names is sent the request's prefill leg; restrict them with sidecar.allow (--sidecar-allow), or make sure only the endpoint picker can set the header")
      }
    }
  }

  static async start(config: Config, opts: ProxyOptions = {}): Promise<ProxyServer> {
    let p: ProxyServer | undefined
    try {
      // The warm-up runs through this front before the admin port opens, and the port last:
      // once it listens, nothing more is awaited before onListening.
      await Runtime.start(config, {
        ...opts,
        routesRequests: true,
        frontConnections: () => (p === undefined ? undefined : p.#front),
        beforeAdmin: async (runtime) => {
          p = new ProxyServer(runtime, opts)
          await p.#warmUp()
        },
      })
      p!.#front = await listenFront(config, p!.#frontHandler(), opts.exclusive)
      opts.onListening?.(p!)
    } catch (err) {
      await p?.close()
      throw err
    }
    return p!
  }

  get config(): Config {
    return this.runtime.config
  }
  get metrics(): RouterMetrics {
    return this.runtime.metrics
  }
  get log(): Logger {
    return this.runtime.log
  }
  get keying(): RequestKeying {
    return this.runtime.keying
  }
  get decisions(): DecisionRing {
    return this.runtime.decisions
  }
  get replicaId(): string {
    return this.runtime.replicaId
  }
  get shareLoad(): ShareLoad | undefined {
    return this.runtime.shareLoad
  }
  /** Shutting down: /health and /ping answer 503 so that load balancers stop sending. */
  get draining(): boolean {
    return this.runtime.draining
  }
  get adminUrl(): string {
    return this.runtime.adminUrl
  }
  endpoint(name: string | undefined): Endpoint | undefined {
    return this.runtime.endpoint(name)
  }
  endpoints(): Iterable<Endpoint> {
    return this.runtime.endpoints()
  }
  reload(next?: Config): ReloadResult {
    return this.runtime.reload(next)
  }
  metricsText(): Promise<string> {
    return this.runtime.metricsText()
  }

  #frontHandler(): Parameters<typeof listenFront>[1] {
    if (this.runtime.ownsFleet) return (req, res) => void handle(this, req, res)
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
      const c = await preconnect(this.runtime.endpoints(), Math.min(connections, this.config.upstream.connections), path, probeMs)
      this.log.debug(c, 'upstream connections opened')
    }
  }

  get url(): string {
    const a = this.#front!.address
    const host = a.family === 'IPv6' ? `[${a.address}]` : a.address === '0.0.0.0' ? '127.0.0.1' : a.address
    return `${this.#front!.protocol}://${host}:${a.port}`
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
    this.runtime.draining = true
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
    await this.runtime.close()
    await this.prefillPods?.close()
  }
}
