// Load from the engines: each instance's /metrics read on an interval, one request at a
// time, and what its engine reports in flight that this router did not send handed to the
// router. At each answer:
//
//   external = max(0, running + waiting − own)     own: this router's requests there, now
//
// so between two scrapes the router's view of an instance is the engine's figure at the
// last scrape plus what this router sent (and minus what finished) since. A scrape that fails
// or is late puts the instance back on this router's own counts (external 0) until one
// answers again; each change of state is logged once.
//
// One timer per scraper, not per instance: every interval, each instance not still being read
// is scraped, and a read older than staleAfterMs is abandoned as late. The scrapes of a tick
// share the event loop's wake-ups.
import type { Logger } from 'pino'
import type { Dispatcher } from 'undici'
import { NOT_VLLM_INTERVAL_MS } from '../../config/engine-load.js'
import type { GaugeRead } from './gauges.js'
import { MAX_HEAD, MAX_TAIL, MetricsRead, type ReadEnd, type ReadOwner } from './read.js'
import type { EngineLoadSink, ScrapeResult } from './sink.js'
import { PrefixRouterError } from '../../core/errors.js'

export interface ScrapeTarget {
  id: string
  /** The instance's /metrics URL. */
  url: string
  /** Connections to read it on (an instance's probe pool). */
  dispatcher: Dispatcher
}

export interface ScraperOptions {
  sink: EngineLoadSink
  intervalMs: number
  /** A scrape not answered within this long is abandoned as late. */
  staleAfterMs: number
  /** Time between scrapes of an instance whose /metrics is not vLLM's (default NOT_VLLM_INTERVAL_MS). */
  notVllmIntervalMs?: number
  log?: Logger
  /** Called after every scrape has been applied (tests, benchmarks). */
  onScrape?(id: string, result: ScrapeResult): void
}

/**
 * What the router goes by for an instance. pending: nothing answered yet (own counts);
 * engine: the engine's figure is in force; fallback: the last scrape failed or was late (own
 * counts); not_vllm: its /metrics has no vLLM gauges (own counts, scraped rarely).
 */
export type LoadState = 'pending' | 'engine' | 'fallback' | 'not_vllm'

export interface EngineLoadStatus {
  state: LoadState
  /** True unless the engine's figure is in force. */
  fallback: boolean
  /** Why the fallback is in force (the last failure). */
  reason: string | null
  /** The engine's gauges at the last scrape that answered. */
  running: number | null
  waiting: number | null
  kvCacheUsage: number | null
  /** When that scrape answered (ms since the epoch), and how long ago. */
  at: number | null
  ageMs: number | null
  /** What the router adds to its own in-flight count for this instance now. */
  external: number
  /** This router's own requests in flight there when the last answer came. */
  ownAtScrape: number | null
  scrapes: Record<ScrapeResult, number>
  /** Answers whose rest, past MAX_TAIL bytes after the gauges, was not read (the connection closed). */
  bodiesCut: number
}

interface Target {
  id: string
  url: string
  dispatcher: Dispatcher
  /** The dispatch options of its GET, made once. */
  request: Dispatcher.DispatchOptions
  /** The read in flight (until the exchange is over), to abandon when late, removed or closing. */
  read: MetricsRead<Target> | undefined
  /** Not scraped again before this time (performance.now()): a not-vLLM instance waits long. */
  nextAt: number
  state: LoadState
  reason: string | null
  running: number | null
  waiting: number | null
  kvCacheUsage: number | null
  at: number | null
  external: number
  ownAtScrape: number | null
  scrapes: Record<ScrapeResult, number>
  /** Answers whose rest was cut off at MAX_TAIL. */
  bodiesCut: number
  removed: boolean
}

/** Why a read was abandoned: late (counted), or not wanted any more (not counted). */
class Late extends PrefixRouterError {
  constructor(message: string) {
    super('ENGINE_LOAD_LATE', message)
  }
}
class Gone extends PrefixRouterError {
  constructor(message: string) {
    super('ENGINE_LOAD_GONE', message)
  }
}

type Outcome = GaugeRead | { ok: false; result: 'late'; reason: string }

/** undici's own time bounds, a backstop for the tick's: at least this, so they use its coarse timers. */
const MIN_UNDICI_TIMEOUT_MS = 1000

export class EngineLoadScraper {
  readonly #targets = new Map<string, Target>()
  /** Reads whose exchange is not over, and close() waiting for them. */
  #open = 0
  #drained: (() => void) | undefined
  #opts: ScraperOptions
  #ticker: NodeJS.Timeout | undefined
  #closed = false
  readonly #owner: ReadOwner<Target>

  constructor(opts: ScraperOptions) {
    this.#opts = opts
    this.#owner = {
      ended: (t, end) => this.#ended(t, end),
      over: (t, read) => {
        if (t.read === read) t.read = undefined
        if (read.cut) this.#cutOff(t)
        if (--this.#open === 0) this.#drained?.()
      },
    }
  }

  /** A reload: the interval and time bound for the next scrapes. */
  configure(o: Pick<ScraperOptions, 'intervalMs' | 'staleAfterMs'>): void {
    const changed = o.intervalMs !== this.#opts.intervalMs
    this.#opts = { ...this.#opts, intervalMs: o.intervalMs, staleAfterMs: o.staleAfterMs }
    for (const t of this.#targets.values()) t.request = this.#request(t.url)
    if (changed && this.#ticker !== undefined) {
      this.#stopTicker()
      this.#startTicker()
    }
  }

  #request(url: string): Dispatcher.DispatchOptions {
    const u = new URL(url)
    const bound = Math.max(MIN_UNDICI_TIMEOUT_MS, this.#opts.staleAfterMs)
    return { origin: u.origin, path: `${u.pathname}${u.search}`, method: 'GET', headersTimeout: bound, bodyTimeout: bound }
  }

  /** The instances to read: new ones are scraped at once, removed ones stop (their figure goes back to 0). */
  sync(targets: readonly ScrapeTarget[]): void {
    if (this.#closed) return
    const wanted = new Map(targets.map((t) => [t.id, t]))
    for (const [id, t] of this.#targets) {
      const w = wanted.get(id)
      // The same id on new connections (an instance that left and came back) starts over.
      if (w === undefined || w.url !== t.url || w.dispatcher !== t.dispatcher) this.#remove(t)
    }
    const now = performance.now()
    for (const w of targets) {
      if (this.#targets.has(w.id)) continue
      const t: Target = {
        id: w.id,
        url: w.url,
        dispatcher: w.dispatcher,
        request: this.#request(w.url),
        read: undefined,
        nextAt: 0,
        state: 'pending',
        reason: 'waiting for the first scrape',
        running: null,
        waiting: null,
        kvCacheUsage: null,
        at: null,
        external: 0,
        ownAtScrape: null,
        scrapes: { ok: 0, failed: 0, late: 0, not_vllm: 0 },
        bodiesCut: 0,
        removed: false,
      }
      this.#targets.set(w.id, t)
      this.#opts.sink.setEngineLoad(t.id, 0, 0)
      this.#scrape(t, now)
    }
    if (this.#targets.size === 0) this.#stopTicker()
    else if (this.#ticker === undefined) this.#startTicker()
  }

  #startTicker(): void {
    this.#ticker = setInterval(() => this.#tick(), this.#opts.intervalMs)
    this.#ticker.unref()
  }

  #stopTicker(): void {
    if (this.#ticker !== undefined) clearInterval(this.#ticker)
    this.#ticker = undefined
  }

  #tick(): void {
    const now = performance.now()
    const { staleAfterMs } = this.#opts
    for (const t of this.#targets.values()) {
      const read = t.read
      if (read !== undefined) {
        // Past its time: unanswered, it is late; answered (the gauges were at the top) but the
        // rest of the body still coming, it is cut off so that the next scrape can go.
        if (now - read.sentAt >= staleAfterMs) read.abort(read.settled ? new Gone('the rest of the body came too slowly') : new Late(`no answer from /metrics within ${staleAfterMs} ms`))
        continue
      }
      if (now >= t.nextAt) this.#scrape(t, now)
    }
  }

  #remove(t: Target): void {
    t.removed = true
    this.#targets.delete(t.id)
    t.read?.abort(new Gone('no longer scraped'))
    this.#opts.sink.setEngineLoad(t.id, 0, 0)
  }

  #scrape(t: Target, now: number): void {
    this.#open++
    const read = new MetricsRead(t.dispatcher, t.request, now, t, this.#owner)
    // Unless the exchange is over already (a dispatcher that refused it at once).
    if (!read.over) t.read = read
  }

  #ended(t: Target, end: ReadEnd): void {
    if (this.#closed || t.removed) return
    let outcome: Outcome
    if (end.kind === 'gauges') outcome = end.read
    // No /metrics page at all: a server that is not vLLM (vLLM always has one).
    else if (end.kind === 'status') outcome = { ok: false, result: end.status === 404 ? 'not_vllm' : 'failed', reason: `/metrics answered ${end.status}` }
    else if (end.error instanceof Gone) return
    else if (end.error instanceof Late || isTimeout(end.error)) outcome = { ok: false, result: 'late', reason: end.error instanceof Late ? end.error.message : `no answer from /metrics in time (${end.error.message})` }
    else outcome = { ok: false, result: 'failed', reason: `/metrics failed: ${end.error.message}` }
    this.#apply(t, outcome)
    if (!outcome.ok && outcome.result === 'not_vllm') t.nextAt = performance.now() + (this.#opts.notVllmIntervalMs ?? NOT_VLLM_INTERVAL_MS)
  }

  #apply(t: Target, o: Outcome): void {
    const { sink } = this.#opts
    if (o.ok) {
      const { running, waiting, kvCacheUsage } = o.gauges
      // Read now, as the answer arrives: the requests of ours the engine's figure includes.
      const own = sink.inFlight(t.id)
      const external = Math.max(0, Math.round(running + waiting - own))
      try {
        sink.setEngineLoad(t.id, external, 0)
      } catch (err) {
        // The gauges are checked for range already; whatever the router still refuses is a
        // failed scrape too, never an exception in the middle of an answer's handler.
        this.#apply(t, { ok: false, result: 'failed', reason: `the router refused the engine's figure ${external}: ${(err as Error).message}` })
        return
      }
      t.running = running
      t.waiting = waiting
      t.kvCacheUsage = kvCacheUsage ?? null
      t.at = Date.now()
      t.external = external
      t.ownAtScrape = own
      t.scrapes.ok++
      this.#enter(t, 'engine', null)
    } else {
      sink.setEngineLoad(t.id, 0, 0)
      t.external = 0
      t.scrapes[o.result]++
      this.#enter(t, o.result === 'not_vllm' ? 'not_vllm' : 'fallback', o.reason)
    }
    this.#opts.onScrape?.(t.id, o.ok ? 'ok' : o.result)
  }

  /** A page too long to read to its end: counted, and said once per instance (the gauges still count). */
  #cutOff(t: Target): void {
    if (t.removed || this.#closed) return
    if (t.bodiesCut++ === 0) {
      this.#opts.log?.warn({ instance: t.id, url: t.url, maxHeadBytes: MAX_HEAD, maxTailBytes: MAX_TAIL }, `engine load: this instance's /metrics goes on past ${MAX_TAIL} bytes after the gauges; each scrape reads no further and closes its connection`)
    }
  }

  /** Logs a change of state once: falling back (with why), and the engine's figure restored. */
  #enter(t: Target, state: LoadState, reason: string | null): void {
    const was = t.state
    t.state = state
    t.reason = reason
    if (was === state) return
    const log = this.#opts.log
    if (state === 'engine') {
      if (was !== 'pending') log?.info({ instance: t.id }, 'engine load: reading the engine again')
    } else if (state === 'not_vllm') {
      log?.warn({ instance: t.id, reason, everyMs: this.#opts.notVllmIntervalMs ?? NOT_VLLM_INTERVAL_MS }, "engine load: this instance's /metrics is not vLLM's; routing on this router's own counts for it, and reading it rarely")
    } else log?.warn({ instance: t.id, reason }, "engine load: falling back to this router's own counts for this instance")
  }

  status(id: string): EngineLoadStatus | undefined {
    const t = this.#targets.get(id)
    if (t === undefined) return undefined
    return {
      state: t.state,
      fallback: t.state !== 'engine',
      reason: t.reason,
      running: t.running,
      waiting: t.waiting,
      kvCacheUsage: t.kvCacheUsage,
      at: t.at,
      ageMs: t.at === null ? null : Math.max(0, Date.now() - t.at),
      external: t.external,
      ownAtScrape: t.ownAtScrape,
      scrapes: { ...t.scrapes },
      bodiesCut: t.bodiesCut,
    }
  }

  ids(): string[] {
    return [...this.#targets.keys()]
  }

  /** Stops the timer, abandons the scrapes in flight and waits for their exchanges to end. */
  async close(): Promise<void> {
    this.#closed = true
    this.#stopTicker()
    for (const t of [...this.#targets.values()]) this.#remove(t)
    if (this.#open > 0) await new Promise<void>((r) => (this.#drained = r))
  }
}

/** undici's own bounds (the backstop) gave up on it. */
function isTimeout(err: Error): boolean {
  const code = (err as { code?: unknown }).code
  return code === 'UND_ERR_HEADERS_TIMEOUT' || code === 'UND_ERR_BODY_TIMEOUT'
}
