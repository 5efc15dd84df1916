// `serve --workers N`: the primary process. It owns everything that must happen once —
// configuration, probes, discovery, outlier ejection, the admin port, each endpoint's shared
// routing state — and N worker processes serve the front port (node:cluster hands each new
// connection to the next worker). Workers get the configuration over the IPC channel and the
// instances from each endpoint's shared state, where the primary publishes them with the
// ring; a worker that dies is replaced, and its leases on the shared state released.
import cluster, { type Worker } from 'node:cluster'
import { fileURLToPath } from 'node:url'
import type { Logger } from 'pino'
import { CliError } from '../command-line/cli-error.js'
import type { Config } from '../config/config.js'
import { RouterClosedError } from '../core/errors.js'
import type { RouterOptions } from '../core/options.js'
import { Router } from '../core/router.js'
import type { HostView } from '../fleet/endpoint-events.js'
import { Runtime, type ReloadResult } from '../runtime/runtime.js'
import { RestartBackoff } from './backoff.js'
import { HostLogWriter } from './host-log.js'
import { publishHosts } from './membership.js'
import { isMessage, type SharedRouters, type ToPrimary, type ToWorker } from './messages.js'
import { ClusterMetrics } from './metrics.js'
import { WorkerRequestCounts } from './request-counts.js'

export interface ClusterOptions {
  workers: number
  reloadConfig?: () => Config
  /**
   * When every worker listens, before any of them handles a request (they hold them until
   * this has returned): where serve prints its banner.
   */
  onListening?(primary: ClusterPrimary): void
}

const key = (endpoint: string, instance: string) => `${endpoint}\u0000${instance}`

export class ClusterPrimary {
  #runtime!: Runtime
  /** The workers have been told to serve (and every one that becomes ready later is). */
  #serving = false
  #metrics: ClusterMetrics | undefined
  /** Every shared router made, until it is found closed: a removed endpoint's drains first. */
  #routers = new Set<Router>()
  /** Workers that said they are listening. */
  #ready = new Set<Worker>()
  /** Each shared router's host-set changes, as published to it. */
  #published = new WeakMap<Router, HostLogWriter>()
  /** Instances in a failure run, as workers were last told. */
  #failing = new Set<string>()
  #backoff = new RestartBackoff()
  #stopping = false
  #url = ''
  #requests = new WorkerRequestCounts()

  private constructor() {}

  /**
   * Starts the primary's runtime (admin port, probes, discovery; no front port) and `workers` workers, and
   * resolves once every worker listens; rejects with the first worker's failure to start.
   */
  static async start(config: Config, opts: ClusterOptions): Promise<ClusterPrimary> {
    const c = new ClusterPrimary()
    c.#runtime = await Runtime.start(config, {
      ...(opts.reloadConfig && { reloadConfig: opts.reloadConfig }),
      endpointEvents: { router: (_name, options) => c.#createRouter(options), onSync: (ep) => c.#publish(ep) },
      onReload: (next) => c.#reconfigure(next),
      metricsText: () => c.#metrics?.text(c.#ready) ?? c.#runtime.metrics.registry.metrics(),
    })
    c.#metrics = new ClusterMetrics(c.#runtime.metrics.registry, () => c.#ready.size)
    // A second signal exits without the drain: the routers are closed all the same, so that a
    // state kept in a file (where the system has no anonymous shared memory) is removed
    // (closing twice is harmless).
    process.once('exit', () => {
      for (const r of c.#routers) r.close()
    })
    cluster.setupPrimary({ exec: fileURLToPath(new URL('./worker-main.js', import.meta.url)), args: [] })
    try {
      await Promise.all(Array.from({ length: opts.workers }, () => c.#startWorker()))
    } catch (err) {
      await c.#stop(true)
      throw err
    }
    // Every worker listens, holding what arrives: the banner, then they serve.
    opts.onListening?.(c)
    c.#serving = true
    for (const w of c.#ready) if (w.isConnected()) w.send({ prefixRouter: 'serve' } satisfies ToWorker)
    return c
  }

  get runtime(): Runtime {
    return this.#runtime
  }

  get log(): Logger {
    return this.#runtime.log
  }

  /** The front port's URL, as the first worker to listen reported it. */
  get url(): string {
    return this.#url
  }

  get workers(): number {
    return this.#ready.size
  }

  reload(): ReloadResult {
    return this.#runtime.reload()
  }

  /** Drains every worker (each as one process drains), then closes the primary's runtime. */
  async shutdown(): Promise<void> {
    await this.#stop(false)
  }

  #createRouter(options: RouterOptions): Router {
    // In shared memory: every worker attaches it, so in-flight counts and overflow are
    // fleet-wide. Anonymous (a memfd the workers open through this process's /proc/<pid>/fd):
    // it goes with the last process mapping it, so a primary killed leaves nothing behind.
    const r = new Router({ ...options, shared: true })
    this.#routers.add(r)
    return r
  }

  #sharedRouters(): SharedRouters {
    const out: SharedRouters = {}
    for (const ep of this.#runtime.endpoints()) {
      const path = ep.router.sharedPath
      // Every router here is made by #createRouter, in shared memory.
      if (path === undefined) throw new Error(`endpoint '${ep.name}' has no shared routing state`)
      out[ep.name] = path
    }
    return out
  }

  #broadcast(m: ToWorker): void {
    for (const w of Object.values(cluster.workers ?? {})) if (w?.isConnected()) w.send(m)
  }

  /** Called as the endpoint syncs, before its shared router takes the new membership. */
  #publish(ep: HostView): void {
    let w = this.#published.get(ep.router)
    if (w === undefined) this.#published.set(ep.router, (w = new HostLogWriter()))
    publishHosts(ep, w)
  }

  /** Every endpoint's record, before a worker is told of its router: one not synced yet has none. */
  #publishAll(): void {
    for (const ep of this.#runtime.endpoints()) this.#publish(ep)
  }

  #reconfigure(config: Config): void {
    this.#publishAll()
    this.#broadcast({ prefixRouter: 'config', config, routers: this.#sharedRouters() })
  }

  #startWorker(): Promise<void> {
    const w = cluster.fork()
    return new Promise((resolve, reject) => {
      w.on('message', (m: unknown) => {
        if (!isMessage<ToPrimary>(m)) return
        if (m.prefixRouter === 'hello') {
          this.#publishAll()
          w.send({ prefixRouter: 'start', config: this.#runtime.config, routers: this.#sharedRouters() })
        } else if (m.prefixRouter === 'ready') {
          this.#ready.add(w)
          if (this.#url === '') this.#url = m.url
          // A replacement worker serves at once; the first ones once all of them listen.
          if (this.#serving) w.send({ prefixRouter: 'serve' } satisfies ToWorker)
          resolve()
        } else if (m.prefixRouter === 'failed') {
          reject(new CliError(m.message, m.exitCode))
        } else this.#onMessage(m, w)
      })
      w.once('exit', (code, signal) => {
        reject(new CliError(`worker ${w.process.pid} exited with ${signal ?? code} before it was ready`, 1))
        this.#exited(w, code, signal)
      })
    })
  }

  #onMessage(m: ToPrimary, from: Worker): void {
    if (m.prefixRouter === 'metrics') return this.#metrics?.answered(m.id, m.metrics)
    if (m.prefixRouter === 'requests') {
      this.#requests.report(from, m.counts)
      return this.#countRequests()
    }
    if (m.prefixRouter !== 'try' && m.prefixRouter !== 'down') return
    const ep = this.#runtime.endpoint(m.endpoint)
    const inst = ep?.instances.get(m.instance)
    if (ep === undefined || inst === undefined || ep.name !== m.endpoint) return
    if (m.prefixRouter === 'down') return ep.markDown(inst, m.reason)
    ep.recordTry(inst, m.result)
    const k = key(ep.name, inst.id)
    const failing = m.result !== 'ok'
    if (failing === this.#failing.has(k)) return
    if (failing) this.#failing.add(k)
    else this.#failing.delete(k)
    this.#broadcast({ prefixRouter: 'streak', endpoint: ep.name, instance: inst.id, failing })
  }

  #exited(w: Worker, code: number | null, signal: string | null): void {
    this.#ready.delete(w)
    this.#requests.retire(w)
    this.#metrics?.gone(w)
    const pid = w.process.pid
    // What the dead process held on the shared state would otherwise stay counted for ever.
    let released = 0
    for (const r of this.#routers) {
      try {
        if (pid !== undefined) released += r.releaseProcess(pid)
      } catch (err) {
        if (!(err instanceof RouterClosedError)) throw err
        this.#routers.delete(r)
      }
    }
    if (this.#stopping) return
    const wait = this.#backoff.next(Date.now())
    this.#metrics?.restarts.inc()
    this.log.warn({ worker: pid, code, signal, releasedLeases: released, restartInMs: wait }, 'worker exited; starting another')
    setTimeout(() => {
      if (this.#stopping) return
      this.#startWorker().catch((err: unknown) => this.log.error({ err: (err as Error).message }, 'replacement worker failed to start'))
    }, wait)
  }

  /** The primary's instances carry the requests every worker sent them, for /admin/instances. */
  #countRequests(): void {
    const total = this.#requests.total()
    for (const ep of this.#runtime.endpoints()) for (const inst of ep.instances.values()) inst.requests = total[ep.name]?.[inst.id] ?? 0
  }

  async #stop(now: boolean): Promise<void> {
    this.#stopping = true
    const alive = Object.values(cluster.workers ?? {}).filter((w): w is Worker => w !== undefined && !w.isDead())
    const exited = alive.map((w) => new Promise<void>((r) => (w.isDead() ? r() : w.once('exit', () => r()))))
    for (const w of alive) {
      if (now) w.process.kill('SIGKILL')
      else if (w.isConnected()) w.send({ prefixRouter: 'drain' } satisfies ToWorker)
    }
    await Promise.all(exited)
    await this.#runtime.close()
  }
}
