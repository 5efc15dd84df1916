// A cluster worker: the front port and the requests on it. Its configuration, instances and
// health come from the primary; it listens only once ProxyServer.start has done everything
// it does before listening, and says so, so the primary counts it ready.
import cluster from 'node:cluster'
import { listenError } from '../command-line/listen-error.js'
import type { Config } from '../config/config.js'
import { ProxyServer } from '../proxy/proxy.js'
import { isMessage, type RequestCounts, type ToPrimary, type ToWorker } from './messages.js'
import { WorkerFleet } from './worker-fleet.js'

function send(m: ToPrimary): void {
  // The primary has gone: the worker is about to be ended with it (node:cluster exits on disconnect).
  if (process.connected) process.send!(m)
}

type Start = Extract<ToWorker, { prefixRouter: 'start' }>

/**
 * The primary's messages, kept from the first: several can arrive in one read, and one that
 * came while nobody listened would be lost. `next` waits for the start message; `handle`
 * then takes the ones kept after it, and every later one.
 */
class Inbox {
  #kept: ToWorker[] = []
  #wake: (() => void) | undefined
  #handler: ((m: ToWorker) => void) | undefined

  constructor() {
    process.on('message', (m: unknown) => {
      if (!isMessage<ToWorker>(m)) return
      if (this.#handler) return this.#handler(m)
      this.#kept.push(m)
      this.#wake?.()
    })
  }

  async start(): Promise<Start> {
    for (;;) {
      const i = this.#kept.findIndex((m) => m.prefixRouter === 'start')
      if (i >= 0) {
        // Configuration sent before it is older than what it carries.
        const start = this.#kept[i] as Start
        this.#kept = [...this.#kept.slice(0, i).filter((m) => m.prefixRouter !== 'config'), ...this.#kept.slice(i + 1)]
        return start
      }
      await new Promise<void>((r) => (this.#wake = r))
    }
  }

  handle(handler: (m: ToWorker) => void): void {
    this.#handler = handler
    for (const m of this.#kept.splice(0)) handler(m)
  }
}

/** A port bound by the primary on the worker's behalf fails as 'bind', where one process says 'listen'. */
function startError(err: unknown, config: Config): { message: string; exitCode: number } {
  const e = err as NodeJS.ErrnoException & { port?: number }
  const asListen = e?.syscall === 'bind' ? { code: e.code, port: e.port, syscall: 'listen' } : err
  const cli = listenError(asListen, config)
  return cli ? { message: cli.message, exitCode: cli.exitCode } : { message: (err as Error)?.stack ?? String(err), exitCode: 1 }
}

export async function runWorker(): Promise<void> {
  if (!cluster.isWorker) throw new Error('runWorker runs in a node:cluster worker')
  // SIGHUP is the primary's to act on (it reloads and tells the workers); its default would end us.
  process.on('SIGHUP', () => undefined)
  const inbox = new Inbox()
  send({ prefixRouter: 'hello' })
  const start = await inbox.start()
  const fleet = new WorkerFleet(start.routers, send)
  let proxy: ProxyServer | undefined
  let pending: ToWorker[] = []
  const apply = (m: ToWorker) => {
    switch (m.prefixRouter) {
      case 'streak':
        return fleet.streak(m.endpoint, m.instance, m.failing)
      case 'config':
        fleet.configure(m.config, m.routers)
        return void proxy!.reload(m.config)
      case 'drain':
        return void drain()
      case 'serve':
        return proxy!.serveHeld()
      case 'metrics':
        return void proxy!.metrics.registry.getMetricsAsJSON().then((metrics) => send({ prefixRouter: 'metrics', id: m.id, metrics }))
      default:
    }
  }
  inbox.handle((m) => {
    // Failure runs apply to endpoints as they are built; the rest waits for the server.
    if (proxy === undefined && m.prefixRouter !== 'streak') pending.push(m)
    else apply(m)
  })

  let draining: Promise<void> | undefined
  const drain = () => {
    draining ??= proxy!.shutdown().then(() => process.exit(0))
    return draining
  }
  // Ctrl-C reaches the whole process group: the worker drains as the primary would have told it
  // to; a second signal ends it at once, as it does one process.
  const onSignal = (s: NodeJS.Signals) => {
    if (draining !== undefined || proxy === undefined) process.exit(s === 'SIGINT' ? 130 : 143)
    void drain()
  }
  process.on('SIGINT', onSignal)
  process.on('SIGTERM', onSignal)

  try {
    // Its log lines carry its pid, as the primary's line about a worker's exit does.
    proxy = await ProxyServer.start(start.config, { fleet: 'mirror', buildEndpoint: fleet.build, holdRequests: true })
  } catch (err) {
    send({ prefixRouter: 'failed', ...startError(err, start.config) })
    process.exit(1)
  }
  for (const m of pending) apply(m)
  pending = []
  send({ prefixRouter: 'ready', url: proxy.url })
  reportRequests(proxy)
}

/** How often a worker tells the primary its per-instance request counts, when they moved. */
const REQUESTS_EVERY_MS = 1000

/** The primary's /admin/instances shows requests and share per instance: the workers count them. */
function reportRequests(proxy: ProxyServer): void {
  let last = ''
  const t = setInterval(() => {
    const counts: RequestCounts = {}
    for (const ep of proxy.endpoints()) counts[ep.name] = Object.fromEntries([...ep.instances.values()].map((i) => [i.id, i.requests]))
    const text = JSON.stringify(counts)
    if (text === last) return
    last = text
    send({ prefixRouter: 'requests', counts })
  }, REQUESTS_EVERY_MS)
  t.unref()
}
