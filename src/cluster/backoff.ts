// How long to wait before replacing a worker that died: at once for an odd crash, then
// doubling while they keep dying, so that a worker that cannot start does not spin a core.

export interface BackoffOptions {
  /** Wait before the second replacement in a row; each further one doubles it. */
  baseMs: number
  maxMs: number
  /** A death this long after the previous one starts the count again. */
  resetAfterMs: number
}

export const RESTART_BACKOFF: BackoffOptions = { baseMs: 100, maxMs: 30_000, resetAfterMs: 60_000 }

export class RestartBackoff {
  #streak = 0
  #last = -Infinity

  constructor(private readonly o: BackoffOptions = RESTART_BACKOFF) {}

  /** The wait before replacing a worker that died at `now` (ms). */
  next(now: number): number {
    if (now - this.#last >= this.o.resetAfterMs) this.#streak = 0
    this.#last = now
    const n = this.#streak++
    return n === 0 ? 0 : Math.min(this.o.maxMs, this.o.baseMs * 2 ** (n - 1))
  }
}
