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
import type { Logger } from 'pino'
import type { Dispatcher } from 'undici'
import { probeGet } from '../probe.js'
import { readEngineGauges, type GaugeRead } from './gauges.js'
import { NOT_VLLM_INTERVAL_MS } from './config.js'
import type { EngineLoadSink, ScrapeResult } from './sink.js'

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
  /** Called after every scrape has been applied (tests, metrics). */
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
}

interface Target {
  id: string
  url: string
  dispatcher: Dispatcher
  timer: NodeJS.Timeout | undefined
  /** The scrape in flight, to abandon on removal or close. */
  abort: AbortController | undefined
  state: LoadState
  reason: string | null
  running: number | null
  waiting: number | null
  kvCacheUsage: number | null
  at: number | null
  external: number
  ownAtScrape: number | null
  scrapes: Record<ScrapeResult, number>
  removed: boolean
}

/** The abort reason of a scrape past its time. */
const LATE = Symbol('late')
const GONE = Symbol('gone')

type Outcome = GaugeRead | { ok: false; result: 'late'; reason: string }

export class EngineLoadScraper {
  readonly #targets = new Map<string, Target>()
  readonly #running = new Set<Promise<void>>()
  #opts: ScraperOptions
  #closed = false

  constructor(opts: ScraperOptions) {
    this.#opts = opts
  }

  /** A reload: the interval and time bound for the next scrapes. */
  configure(o: Pick<ScraperOptions, 'intervalMs' | 'staleAfterMs'>): void {
    this.#opts = { ...this.#opts, intervalMs: o.intervalMs, staleAfterMs: o.staleAfterMs }
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
    for (const w of targets) {
      if (this.#targets.has(w.id)) continue
      const t: Target = {
        ...w,
        timer: undefined,
        abort: undefined,
        state: 'pending',
        reason: 'waiting for the first scrape',
        running: null,
        waiting: null,
        kvCacheUsage: null,
        at: null,
        external: 0,
        ownAtScrape: null,
        scrapes: { ok: 0, failed: 0, late: 0, not_vllm: 0 },
        removed: false,
      }
      this.#targets.set(w.id, t)
      this.#opts.sink.setEngineLoad(t.id, 0, 0)
      this.#schedule(t, 0)
    }
  }

  #remove(t: Target): void {
    t.removed = true
    this.#targets.delete(t.id)
    if (t.timer !== undefined) clearTimeout(t.timer)
    t.timer = undefined
    t.abort?.abort(GONE)
    this.#opts.sink.setEngineLoad(t.id, 0, 0)
  }

  #schedule(t: Target, delayMs: number): void {
    t.timer = setTimeout(() => {
      t.timer = undefined
      const p = this.#scrape(t)
      this.#running.add(p)
      void p.finally(() => this.#running.delete(p))
    }, delayMs)
    t.timer.unref()
  }

  async #scrape(t: Target): Promise<void> {
    if (this.#closed || t.removed) return
    const { staleAfterMs } = this.#opts
    const sentAt = performance.now()
    const ac = new AbortController()
    t.abort = ac
    const late = setTimeout(() => ac.abort(LATE), staleAfterMs)
    late.unref()
    let outcome: Outcome
    try {
      const r = await probeGet(t.url, t.dispatcher, staleAfterMs, ac.signal)
      outcome =
        r.status === 200
          ? readEngineGauges(r.text)
          : // No /metrics page at all: a server that is not vLLM (vLLM always has one).
            { ok: false, result: r.status === 404 ? 'not_vllm' : 'failed', reason: `/metrics answered ${r.status}` }
    } catch (err) {
      if (ac.signal.reason === GONE || this.#closed) return
      outcome =
        ac.signal.reason === LATE
          ? { ok: false, result: 'late', reason: `no answer from /metrics within ${staleAfterMs} ms` }
          : { ok: false, result: 'failed', reason: `/metrics failed: ${(err as Error).message}` }
    } finally {
      clearTimeout(late)
      t.abort = undefined
    }
    if (this.#closed || t.removed) return
    this.#apply(t, outcome)
    const every = outcome.ok || outcome.result !== 'not_vllm' ? this.#opts.intervalMs : (this.#opts.notVllmIntervalMs ?? NOT_VLLM_INTERVAL_MS)
    this.#schedule(t, Math.max(0, sentAt + every - performance.now()))
  }

  #apply(t: Target, o: Outcome): void {
    const { sink } = this.#opts
    if (o.ok) {
      const { running, waiting, kvCacheUsage } = o.gauges
      // Read now, as the answer arrives: the requests of ours the engine's figure includes.
      const own = sink.inFlight(t.id)
      const external = Math.max(0, Math.round(running + waiting - own))
      sink.setEngineLoad(t.id, external, 0)
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
    }
  }

  ids(): string[] {
    return [...this.#targets.keys()]
  }

  /** Stops every timer, abandons the scrapes in flight and waits for them to end. */
  async close(): Promise<void> {
    this.#closed = true
    for (const t of [...this.#targets.values()]) this.#remove(t)
    await Promise.all([...this.#running])
  }
}
