// Warnings about what a publisher sends, at most one line per kind per interval: a publisher
// whose format changed, or a hostile one, sends bad frames by the thousand a second, and one
// line each would bury every other log line (and cost more than the frames). The first of a
// kind is logged as it happens; the rest are counted, and a summary line (how many, and the
// last one) closes each interval that had any. Every one is still counted by the caller.
export type LimitedLevel = 'info' | 'warn' | 'error'
export type LimitedLog = (level: LimitedLevel, msg: string, fields?: object) => void

interface Window {
  suppressed: number
  last: string
  level: LimitedLevel
  fields: object | undefined
  timer: NodeJS.Timeout
}

export const DEFAULT_LOG_INTERVAL_MS = 10_000

export class LogLimiter {
  readonly #log: LimitedLog
  readonly #intervalMs: number
  /** Names the publisher in summary lines. */
  readonly #who: string
  readonly #open = new Map<string, Window>()
  #closed = false

  constructor(log: LimitedLog, who: string, intervalMs = DEFAULT_LOG_INTERVAL_MS) {
    this.#log = log
    this.#who = who
    this.#intervalMs = intervalMs
  }

  /** Logs `msg` unless a line of this kind went out less than an interval ago (then it is summed up later). */
  note(kind: string, level: LimitedLevel, msg: string, fields?: object): void {
    if (this.#closed) return
    const w = this.#open.get(kind)
    if (w !== undefined) {
      w.suppressed++
      w.last = msg
      w.level = level
      w.fields = fields
      return
    }
    this.#log(level, msg, fields)
    this.#startWindow(kind, level)
  }

  close(): void {
    this.#closed = true
    for (const w of this.#open.values()) clearTimeout(w.timer)
    this.#open.clear()
  }

  #startWindow(kind: string, level: LimitedLevel): void {
    const w: Window = { suppressed: 0, last: '', level, fields: undefined, timer: undefined as unknown as NodeJS.Timeout }
    w.timer = setTimeout(() => {
      this.#open.delete(kind)
      if (this.#closed || w.suppressed === 0) return
      const s = this.#intervalMs / 1000
      this.#log(w.level, `kv events: ${this.#who}: ${w.suppressed} more like that in the last ${s} s (not logged one by one); the last: ${w.last}`, {
        ...w.fields,
        suppressed: w.suppressed,
      })
      // Still coming: the next interval is summed up too, rather than its first line logged.
      this.#startWindow(kind, w.level)
    }, this.#intervalMs)
    w.timer.unref()
    this.#open.set(kind, w)
  }
}
