// Runs an endpoint's discovery sources and feeds their lists to it, logging every change
// of membership. A source that fails keeps its last list in the endpoint.
import type { Logger } from 'pino'
import type { DiscoveryTarget } from '../host-entry.js'
import { createSource } from './create.js'
import { describeSource, type DiscoverySourceConfig } from '../../config/discovery.js'
import { DiscoveryError, type DiscoverySource, type InstanceEntry } from './source.js'

/** How long start and reload wait for a new source's first answer before going on without it. */
const FIRST_ANSWER_WAIT_MS = 10_000

interface Running {
  source: DiscoverySource
  label: string
  /** The last failure logged, so that a source failing every interval warns once, not every time. */
  failing: string | undefined
}

export class EndpointDiscovery {
  readonly #ep: DiscoveryTarget
  readonly #log: Logger
  /** By the source's configuration: a reload keeps an unchanged source running. */
  readonly #running = new Map<string, Running>()

  constructor(ep: DiscoveryTarget, log: Logger) {
    this.#ep = ep
    this.#log = log.child({ endpoint: ep.name })
  }

  /**
   * Runs exactly these sources: new ones start, ones no longer listed stop and their
   * instances leave, unchanged ones go on. Resolves when each new source has answered once
   * (its instances probed) or failed, or after FIRST_ANSWER_WAIT_MS.
   */
  async apply(sources: readonly DiscoverySourceConfig[]): Promise<void> {
    const wanted = new Map(sources.map((s) => [JSON.stringify(s), s]))
    for (const [key, r] of this.#running) {
      if (wanted.has(key)) continue
      this.#running.delete(key)
      void r.source.stop()
      this.#changed(r.label, this.#ep.setDiscovered(key, undefined))
    }
    const first: Promise<void>[] = []
    for (const [key, cfg] of wanted) {
      if (this.#running.has(key)) continue
      const r: Running = { source: createSource(cfg), label: describeSource(cfg), failing: undefined }
      this.#running.set(key, r)
      first.push(
        new Promise<void>((answered) => {
          const onChange = (list: InstanceEntry[], partial?: Error) => {
            if (this.#running.get(key) !== r) return
            if (partial !== undefined) {
              const summary = (partial instanceof DiscoveryError ? partial.summary : undefined) ?? "discovery source answered in part; keeping the failed query's last answer"
              if (r.failing !== partial.message) this.#log.warn({ source: r.label, err: partial.message, instances: list.length }, summary)
              r.failing = partial.message
            } else {
              if (r.failing !== undefined) this.#log.info({ source: r.label }, 'discovery source answers again')
              r.failing = undefined
            }
            const change = this.#ep.setDiscovered(key, list)
            this.#changed(r.label, change)
            void change.joined.then(() => answered())
          }
          const onError = (err: Error) => {
            if (this.#running.get(key) !== r) return
            const kept = this.#ep.size
            const repeat = r.failing === err.message && !(err instanceof DiscoveryError && err.distinct)
            if (!repeat) this.#log.warn({ source: r.label, err: err.message, instances: kept }, 'discovery source failed; keeping its last list')
            else this.#log.debug({ source: r.label, err: err.message }, 'discovery source still failing')
            r.failing = err.message
            answered()
          }
          r.source.start(onChange, onError)
        }),
      )
    }
    if (first.length === 0) return
    let timer: NodeJS.Timeout | undefined
    const waited = new Promise<'timeout'>((resolve) => {
      timer = setTimeout(() => resolve('timeout'), FIRST_ANSWER_WAIT_MS)
      timer.unref()
    })
    const r = await Promise.race([Promise.all(first), waited])
    clearTimeout(timer)
    if (r === 'timeout') this.#log.warn({ waitedMs: FIRST_ANSWER_WAIT_MS }, 'discovery: a source has not answered yet; going on without it')
  }

  #changed(source: string, c: { added: string[]; removed: string[] }): void {
    if (c.added.length === 0 && c.removed.length === 0) return
    this.#log.info({ source, added: c.added, removed: c.removed }, 'discovery: membership changed')
  }

  async stop(): Promise<void> {
    const all = [...this.#running.values()]
    this.#running.clear()
    await Promise.all(all.map((r) => r.source.stop().catch(() => undefined)))
  }
}
