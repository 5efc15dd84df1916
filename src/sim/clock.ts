// The engine reads time and sets timers only through a Clock, so one implementation of
// the cache, scheduler and latency model runs on both:
// - RealClock: simulated milliseconds = wall milliseconds * timeScale (live workers);
// - VirtualClock: time jumps to the next event (no sockets, no waiting).
// Both keep their events in the same queue. Callbacks receive the time they were
// scheduled for, not the time they ran: a live engine whose timer fires late still stamps
// its step with the model's time, so lateness delays delivery without accumulating into
// the simulated timeline.

export interface TimerHandle {
  readonly at: number
}

export interface Clock {
  /** Simulated milliseconds since the clock's origin. */
  now(): number
  /** Runs `fn(at)` when simulated time reaches `at` (soon, if it already has). */
  schedule(at: number, fn: (at: number) => void): TimerHandle
  cancel(handle: TimerHandle): void
}

interface Event extends TimerHandle {
  at: number
  seq: number
  fn: ((at: number) => void) | null
}

/** Events by time, then by scheduling order (a binary heap; cancelled events are skipped when popped). */
class EventQueue {
  private seq = 0
  private heap: Event[] = []
  /** Events neither run nor cancelled. */
  live = 0

  get size(): number {
    return this.heap.length
  }

  /** Time of the earliest event (cancelled or not); Infinity if none. */
  get nextAt(): number {
    return this.heap.length > 0 ? this.heap[0]!.at : Infinity
  }

  push(at: number, fn: (at: number) => void): Event {
    const ev: Event = { at, seq: this.seq++, fn }
    this.live++
    const heap = this.heap
    let i = heap.length
    heap.push(ev)
    while (i > 0) {
      const p = (i - 1) >> 1
      if (!less(ev, heap[p]!)) break
      heap[i] = heap[p]!
      i = p
    }
    heap[i] = ev
    return ev
  }

  cancel(ev: Event): void {
    if (ev.fn === null) return
    ev.fn = null
    this.live--
    if (this.live === 0) this.heap = [] // nothing left to run: drop the cancelled ones
  }

  /**
   * Removes the earliest event and returns its callback, or null if it was cancelled. The
   * caller advances its time to the event's before calling it.
   */
  take(): { at: number; fn: ((at: number) => void) | null } {
    const ev = this.pop()
    const fn = ev.fn
    if (fn !== null) {
      ev.fn = null
      this.live--
    }
    return { at: ev.at, fn }
  }

  private pop(): Event {
    const heap = this.heap
    const top = heap[0]!
    const last = heap.pop()!
    const n = heap.length
    if (n > 0) {
      let i = 0
      for (;;) {
        const l = 2 * i + 1
        if (l >= n) break
        const r = l + 1
        const c = r < n && less(heap[r]!, heap[l]!) ? r : l
        if (!less(heap[c]!, last)) break
        heap[i] = heap[c]!
        i = c
      }
      heap[i] = last
    }
    return top
  }
}

function less(a: Event, b: Event): boolean {
  return a.at < b.at || (a.at === b.at && a.seq < b.seq)
}

/** Runs of due events yield to I/O after this much wall time. */
const SLICE_MS = 5

/**
 * Wall time scaled by `timeScale`. One timer waits for the earliest event; when it fires,
 * every event already due runs in order, so steps shorter than the timer resolution
 * (~1 ms) at high time scales do not each wait a timer tick.
 */
export class RealClock implements Clock {
  private readonly origin = performance.now()
  private readonly queue = new EventQueue()
  private timer: NodeJS.Timeout | undefined
  private timerAt = Infinity
  private running = false

  constructor(readonly timeScale = 1) {
    if (!(timeScale > 0) || !Number.isFinite(timeScale)) throw new RangeError('timeScale must be a positive number')
  }

  now(): number {
    return (performance.now() - this.origin) * this.timeScale
  }

  schedule(at: number, fn: (at: number) => void): TimerHandle {
    const ev = this.queue.push(at, fn)
    if (!this.running && at < this.timerAt) this.arm()
    return ev
  }

  cancel(handle: TimerHandle): void {
    this.queue.cancel(handle as Event)
    // A timer armed for nothing would keep the process alive (a closed fleet must not).
    if (this.queue.live === 0 && !this.running) this.arm()
  }

  private arm(): void {
    clearTimeout(this.timer)
    const at = this.queue.live > 0 ? this.queue.nextAt : Infinity
    this.timerAt = at
    this.timer = at === Infinity ? undefined : setTimeout(this.fire, Math.max(0, (at - this.now()) / this.timeScale))
  }

  private readonly fire = (): void => {
    this.timer = undefined
    this.timerAt = Infinity
    this.running = true
    const start = performance.now()
    try {
      while (this.queue.size > 0 && this.queue.nextAt <= this.now()) {
        const { at, fn } = this.queue.take()
        if (fn !== null) fn(at)
        if (performance.now() - start > SLICE_MS) break
      }
    } finally {
      this.running = false
      this.arm()
    }
  }
}

export class VirtualClock implements Clock {
  private time = 0
  private readonly queue = new EventQueue()

  now(): number {
    return this.time
  }

  /** Events scheduled and not yet run (cancelled ones may still be counted). */
  get pending(): number {
    return this.queue.size
  }

  schedule(at: number, fn: (at: number) => void): TimerHandle {
    return this.queue.push(at < this.time ? this.time : at, fn)
  }

  cancel(handle: TimerHandle): void {
    this.queue.cancel(handle as Event)
  }

  /** Runs events in time order up to and including `until`, then sets the time to `until`. */
  runUntil(until: number): void {
    while (this.queue.size > 0 && this.queue.nextAt <= until) this.runOne()
    if (until > this.time) this.time = until
  }

  /** Runs until no event is left (or `maxEvents` have run). Returns the events run. */
  run(maxEvents = Infinity): number {
    let n = 0
    while (this.queue.size > 0 && n < maxEvents) {
      this.runOne()
      n++
    }
    return n
  }

  private runOne(): void {
    const { at, fn } = this.queue.take()
    if (fn === null) return
    this.time = at
    fn(at)
  }
}
