// The event loop of a trace shape: sources of requests (a Poisson stream, a conversation's
// next turn) ordered by their next arrival. A source fires its request and says when its
// next one comes, if ever, and may start others (a new conversation) as it fires.
import { popByTime, pushByTime } from '../by-time.js'
import type { TraceRow } from './types.js'

export interface Source {
  /** When this source's next request arrives (ms); Infinity once it has no more. */
  at: number
  /** The request arriving at `at`; sets `at` to the next one's time. */
  fire(queue: Arrivals): TraceRow
}

export class Arrivals {
  private readonly heap: Source[] = []

  add(s: Source): void {
    if (s.at !== Infinity) pushByTime(this.heap, s)
  }

  /** Every request of every source, in arrival order. */
  *run(): Generator<TraceRow, void, undefined> {
    for (;;) {
      const s = popByTime(this.heap)
      if (s === undefined) return
      const row = s.fire(this)
      this.add(s)
      yield row
    }
  }
}
