// What one strategy's lane measures. Hit rates are token-weighted, as vLLM counts them
// (vllm:prefix_cache_hits_total / vllm:prefix_cache_queries_total): cached prompt tokens
// at a request's first admission over its prompt tokens. Time series are kept per
// simulated second of arrival, so the report can roll them into any window.
import type { VirtualResult } from '../sim/virtual-fleet.js'

/** A growable array of doubles. */
export class Samples {
  private data = new Float64Array(1024)
  length = 0

  push(v: number): void {
    if (this.length === this.data.length) {
      const next = new Float64Array(this.data.length * 2)
      next.set(this.data)
      this.data = next
    }
    this.data[this.length++] = v
  }

  /** The values, in the order pushed (a view: valid until the next push). */
  values(): Float64Array {
    return this.data.subarray(0, this.length)
  }

  /** Sorted copy. */
  sorted(): Float64Array {
    return this.data.slice(0, this.length).sort()
  }
}

/** The q-quantile (0–1) of sorted values, by the nearest-rank method; NaN when empty. */
export function quantile(sorted: Float64Array, q: number): number {
  if (sorted.length === 0) return NaN
  const i = Math.min(sorted.length - 1, Math.max(0, Math.ceil(q * sorted.length) - 1))
  return sorted[i]!
}

/** What one lane records per finished request, when phases are reported (phases.ts reads it). */
export class RequestLog {
  readonly arrival = new Samples()
  readonly ttft = new Samples()
  readonly finished = new Samples()
  readonly prompt = new Samples()
  readonly cached = new Samples()
  readonly output = new Samples()

  record(r: VirtualResult): void {
    this.arrival.push(r.arrivalMs)
    this.ttft.push(r.ttftMs)
    this.finished.push(r.finishedMs)
    this.prompt.push(r.promptTokens)
    this.cached.push(r.cachedTokens)
    this.output.push(r.outputTokens)
  }
}

export class LaneStats {
  readonly ttftMs = new Samples()
  routed = 0
  rejected = 0
  finished = 0
  promptTokens = 0
  cachedTokens = 0
  outputTokens = 0
  preemptions = 0
  overflow = 0
  /** False when the strategy has no overflow notion. */
  overflowKnown = true
  /** Requests per engine index. */
  readonly perInstance: number[]
  /** Finished by the end of the arrival window (for throughput). */
  completedInWindow = 0
  outputInWindow = 0
  /** Per second of arrival: prompt and cached tokens. */
  readonly secPrompt: Float64Array
  readonly secCached: Float64Array

  constructor(
    readonly name: string,
    engines: number,
    readonly durationMs: number,
    /** Every finished request, kept when the report breaks results out by phase. */
    readonly log: RequestLog | null = null,
  ) {
    this.perInstance = new Array<number>(engines).fill(0)
    const secs = Math.max(1, Math.ceil(durationMs / 1000))
    this.secPrompt = new Float64Array(secs)
    this.secCached = new Float64Array(secs)
  }

  routedTo(instance: number, overflow: boolean | null): void {
    this.routed++
    this.perInstance[instance] = (this.perInstance[instance] ?? 0) + 1
    if (overflow === null) this.overflowKnown = false
    else if (overflow) this.overflow++
  }

  done(r: VirtualResult): void {
    this.finished++
    this.log?.record(r)
    if (r.ttftMs >= 0) this.ttftMs.push(r.ttftMs)
    this.promptTokens += r.promptTokens
    this.cachedTokens += r.cachedTokens
    this.outputTokens += r.outputTokens
    this.preemptions += r.preemptions
    if (r.finishedMs <= this.durationMs) {
      this.completedInWindow++
      this.outputInWindow += r.outputTokens
    }
    const s = Math.min(this.secPrompt.length - 1, Math.floor(r.arrivalMs / 1000))
    this.secPrompt[s]! += r.promptTokens
    this.secCached[s]! += r.cachedTokens
  }

  /** Token hit rate of requests arriving in [fromMs, toMs). */
  hitRate(fromMs: number, toMs: number): number {
    const a = Math.max(0, Math.floor(fromMs / 1000))
    const b = Math.min(this.secPrompt.length, Math.ceil(toMs / 1000))
    let p = 0
    let c = 0
    for (let s = a; s < b; s++) {
      p += this.secPrompt[s]!
      c += this.secCached[s]!
    }
    return p === 0 ? NaN : c / p
  }
}

/**
 * Which instance each routing key went to, to measure how much traffic a scale event
 * moves. A key is the prefix_aware key of a request (see prepare.ts trackingKey), the same
 * for every strategy, so "moved" means the same thing for all of them.
 */
export class KeyTracker {
  private readonly last = new Map<number, number>()
  private readonly windows: EventWindow[]

  constructor(events: readonly { atMs: number }[], windowMs: number) {
    this.windows = events.map((e) => ({
      atMs: e.atMs,
      windowMs,
      snapshot: null,
      instance: -1,
      members: 0,
      before: { seen: 0, moved: 0 },
      after: { seen: 0, moved: 0, total: 0, toInstance: 0, fromInstance: new Map() },
    }))
  }

  /**
   * Called at each event time, before requests arriving at or after it: `instance` is the
   * one that joined or left, `members` the fleet's size after the event.
   */
  freeze(atMs: number, instance = -1, members = 0): void {
    for (const w of this.windows) {
      if (w.atMs === atMs && w.snapshot === null) {
        w.snapshot = new Map(this.last)
        w.instance = instance
        w.members = members
        break
      }
    }
  }

  record(key: number, instance: number, atMs: number): void {
    const prev = this.last.get(key)
    for (const w of this.windows) {
      if (atMs >= w.atMs - w.windowMs && atMs < w.atMs && prev !== undefined) {
        w.before.seen++
        if (prev !== instance) w.before.moved++
      } else if (atMs >= w.atMs && atMs < w.atMs + w.windowMs && w.snapshot !== null) {
        const home = w.snapshot.get(key)
        w.after.total++
        if (instance === w.instance) w.after.toInstance++
        if (home !== undefined) {
          w.after.seen++
          if (home !== instance) w.after.moved++
          // Keys the event's instance served before it (a removed one's): where they go now.
          if (home === w.instance) w.after.fromInstance.set(instance, (w.after.fromInstance.get(instance) ?? 0) + 1)
        }
      }
    }
    this.last.set(key, instance)
  }

  results(): { atMs: number; moved: number; churn: number; keysAfter: number; share: number; fairShare: number; spreadTo: number; spreadMax: number }[] {
    return this.windows.map((w) => {
      const from = [...w.after.fromInstance.values()]
      const fromTotal = from.reduce((a, b) => a + b, 0)
      return {
        atMs: w.atMs,
        moved: w.after.seen === 0 ? NaN : w.after.moved / w.after.seen,
        churn: w.before.seen === 0 ? NaN : w.before.moved / w.before.seen,
        keysAfter: w.after.seen,
        share: w.after.total === 0 ? NaN : w.after.toInstance / w.after.total,
        fairShare: w.members === 0 ? NaN : 1 / w.members,
        spreadTo: w.after.fromInstance.size,
        spreadMax: fromTotal === 0 ? NaN : Math.max(...from) / fromTotal,
      }
    })
  }
}

interface EventWindow {
  atMs: number
  windowMs: number
  snapshot: Map<number, number> | null
  /** The instance that joined or left at the event, and the fleet's size after it. */
  instance: number
  members: number
  before: { seen: number; moved: number }
  /** total: every request in the window; toInstance: those sent to the event's instance; fromInstance: where keys it served went. */
  after: { seen: number; moved: number; total: number; toInstance: number; fromInstance: Map<number, number> }
}
