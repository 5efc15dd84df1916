// One GET of an instance's /metrics, read as it arrives: the gauges are taken from the first
// bytes that tell them (vLLM writes them near the top, within MAX_HEAD), and the rest of the
// body is let through unread, so the connection is kept for the next scrape, up to MAX_TAIL
// bytes: a page longer than that is cut off there (its connection closed; the next scrape
// opens another), so a huge page costs MAX_HEAD + MAX_TAIL per scrape, not its length. The
// handler is undici's dispatch interface: no response stream, no copy of the whole body, no
// string of it.
import type { Dispatcher } from 'undici'
import { readEngineGauges, type GaugeRead } from './gauges.js'
import { PrefixRouterError } from '../../core/errors.js'

/** How a read ended: the gauges (or why not), a status that is not 200, or an error. */
export type ReadEnd = { kind: 'gauges'; read: GaugeRead } | { kind: 'status'; status: number } | { kind: 'error'; error: Error }

/** Bytes of a body searched for the gauges before it is judged on them alone. */
export const MAX_HEAD = 1 << 20
/**
 * Bytes of the rest of a body let through after the gauges, to keep its connection: vLLM's
 * whole page is tens of KB (a few hundred with many engines or adapters).
 */
export const MAX_TAIL = 256 << 10

/** Why a read was cut off after its gauges: the body went on past MAX_TAIL. */
export class TailCut extends PrefixRouterError {
  constructor(message: string) {
    super('ERR_METRICS_PAGE_CUT', message)
    this.name = 'TailCut'
  }
}
const EMPTY = Buffer.alloc(0)

/** Who hears how a read went: one object for every read of a scraper, so a read makes no closures. */
export interface ReadOwner<T> {
  /** Once: as soon as the gauges are known, or when the answer ends. */
  ended(target: T, end: ReadEnd): void
  /** Once, after ended(): the exchange is over (the rest of the body read, or an error). */
  over(target: T, read: MetricsRead<T>): void
}

export class MetricsRead<T> implements Dispatcher.DispatchHandler {
  readonly sentAt: number
  #controller: Dispatcher.DispatchController | undefined
  #abortWith: Error | undefined
  #status = 0
  #head: Buffer | undefined
  /** Bytes of the body after the gauges were known. */
  #tail = 0
  #cut = false
  #settled = false
  #finished = false
  readonly #target: T
  readonly #owner: ReadOwner<T>

  /** Sends the GET at once; `owner` hears about it for `target`. */
  constructor(dispatcher: Dispatcher, opts: Dispatcher.DispatchOptions, now: number, target: T, owner: ReadOwner<T>) {
    this.sentAt = now
    this.#target = target
    this.#owner = owner
    try {
      dispatcher.dispatch(opts, this)
    } catch (err) {
      this.onResponseError(undefined, err as Error)
    }
  }

  /** Gives up on the answer (late, removed, closing): ended() gets the error unless it was called already. */
  abort(reason: Error): void {
    this.#abortWith ??= reason
    this.#controller?.abort(reason)
  }

  #settle(end: ReadEnd): void {
    if (this.#settled) return
    this.#settled = true
    this.#head = undefined
    this.#owner.ended(this.#target, end)
  }

  onRequestStart(controller: Dispatcher.DispatchController): void {
    this.#controller = controller
    if (this.#abortWith !== undefined) controller.abort(this.#abortWith)
  }

  onResponseStart(_c: Dispatcher.DispatchController, statusCode: number): void {
    this.#status = statusCode
    if (statusCode !== 200) this.#settle({ kind: 'status', status: statusCode })
  }

  onResponseData(c: Dispatcher.DispatchController, chunk: Buffer): void {
    // Settled: the gauges are known, or the status was not 200 (a body as long as any other's).
    if (this.#settled) {
      this.#tail += chunk.length
      if (this.#tail > MAX_TAIL && !this.#cut) {
        this.#cut = true
        c.abort(new TailCut(`the page goes on past ${MAX_TAIL} bytes after the gauges`))
      }
      return
    }
    const head = (this.#head = this.#head === undefined ? chunk : Buffer.concat([this.#head, chunk]))
    const read = readEngineGauges(head, head.length >= MAX_HEAD)
    if (read !== undefined) this.#settle({ kind: 'gauges', read })
  }

  onResponseEnd(): void {
    if (!this.#settled) this.#settle({ kind: 'gauges', read: readEngineGauges(this.#head ?? EMPTY)! })
    this.#finish()
  }

  onResponseError(_c: Dispatcher.DispatchController | undefined, error: Error): void {
    this.#settle({ kind: 'error', error: this.#abortWith ?? error })
    this.#finish()
  }

  #finish(): void {
    if (this.#finished) return
    this.#finished = true
    this.#owner.over(this.#target, this)
  }

  /** Whether the rest of the body was cut off at MAX_TAIL. */
  get cut(): boolean {
    return this.#cut
  }

  /** Whether ended() has been called; the connection may still be reading the rest of the body. */
  get settled(): boolean {
    return this.#settled
  }

  /** Whether the exchange is over (over() has been called). */
  get over(): boolean {
    return this.#finished
  }
}
