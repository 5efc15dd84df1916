// The event loop of a trace shape: sources of requests (a Poisson stream, a conversation's
// next turn) ordered by their next arrival. A source fires its request and says when its
// next one comes, if ever, and may start others (a new conversation) as it fires.
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
    if (s.at === Infinity) return
    const heap = this.heap
    let i = heap.length
    heap.push(s)
    while (i > 0) {
      const parent = (i - 1) >> 1
      if (heap[parent]!.at <= s.at) break
      heap[i] = heap[parent]!
      i = parent
    }
    heap[i] = s
  }

  /** Every request of every source, in arrival order. */
  *run(): Generator<TraceRow, void, undefined> {
    for (;;) {
      const s = this.pop()
      if (s === undefined) return
      const row = s.fire(this)
      this.add(s)
      yield row
    }
  }

  private pop(): Source | undefined {
    const heap = this.heap
    const top = heap[0]
    const last = heap.pop()
    if (top === undefined || last === undefined || heap.length === 0) return top
    let i = 0
    for (;;) {
      const l = 2 * i + 1
      if (l >= heap.length) break
      const r = l + 1
      const c = r < heap.length && heap[r]!.at < heap[l]!.at ? r : l
      if (heap[c]!.at >= last.at) break
      heap[i] = heap[c]!
      i = c
    }
    heap[i] = last
    return top
  }
}
