// Measurements per stretch of arrival time (a workload's phases: cache-pressure's rate
// steps), from a log of every request a lane finished. TTFT and hit rate are of the requests
// that arrived in the phase (what the phase's load did to them); throughput is of the
// requests that finished in it (what the fleet delivered meanwhile), as a load generator
// stepping its rate would report each step.
import { quantile, type RequestLog } from './stats.js'
import type { Phase } from './types.js'

export interface PhaseResult {
  label: string
  startMs: number
  endMs: number
  /** Requests that arrived in the phase (and finished, as every request does by the drain). */
  arrived: number
  ttftMs: { p50: number; p90: number }
  /** Token hit rate of the requests that arrived in the phase. */
  hitRate: number
  /** Requests that finished within the phase. */
  completed: number
  /** Output tokens of those, per second of the phase. */
  outputTokensPerSec: number
}

export function phaseResults(log: RequestLog, phases: readonly Phase[]): PhaseResult[] {
  const arrival = log.arrival.values()
  const finished = log.finished.values()
  const ttft = log.ttft.values()
  const prompt = log.prompt.values()
  const cached = log.cached.values()
  const output = log.output.values()
  return phases.map((ph) => {
    const ttfts: number[] = []
    let p = 0
    let c = 0
    let completed = 0
    let out = 0
    for (let i = 0; i < arrival.length; i++) {
      if (arrival[i]! >= ph.startMs && arrival[i]! < ph.endMs) {
        if (ttft[i]! >= 0) ttfts.push(ttft[i]!)
        p += prompt[i]!
        c += cached[i]!
      }
      if (finished[i]! >= ph.startMs && finished[i]! < ph.endMs) {
        completed++
        out += output[i]!
      }
    }
    const sorted = Float64Array.from(ttfts).sort()
    return {
      label: ph.label,
      startMs: ph.startMs,
      endMs: ph.endMs,
      arrived: ttfts.length,
      ttftMs: { p50: quantile(sorted, 0.5), p90: quantile(sorted, 0.9) },
      hitRate: p === 0 ? NaN : c / p,
      completed,
      outputTokensPerSec: out / ((ph.endMs - ph.startMs) / 1000),
    }
  })
}
