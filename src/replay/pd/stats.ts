// What a disaggregated replay lane measures: time to first token and time per output token
// (TPOT: the gap between tokens after the first, as a client's stream sees it) per request,
// goodput under an SLO on both, the hit rate, and how many requests ran a prefill leg.
import type { PdResult, VirtualResult } from '../../sim/virtual-fleet.js'
import { Samples } from '../stats.js'
import type { PdPlacement } from './types.js'

/** A request meets the SLO when its TTFT and its TPOT are both within these (ms). */
export interface Slo {
  ttftMs: number
  tpotMs: number
}

/**
 * --ttft-slo and --tpot-slo defaults, our choice for a 70B chat service: a first token within a
 * second, and tokens at least at ~20 a second (50 ms each), a reading speed. Goodput counts the
 * requests within both, as DistServe and vLLM's benchmark_serving --goodput do.
 */
export const DEFAULT_SLO: Slo = { ttftMs: 1000, tpotMs: 50 }

export class PdStats {
  readonly ttftMs = new Samples()
  readonly tpotMs = new Samples()
  requests = 0
  rejected = 0
  failed = 0
  finished = 0
  /** Requests routed with a prefill leg, and those whose decode instance read remote KV. */
  split = 0
  pulled = 0
  /** Finished within the run's duration, and those of them within the SLO. */
  completedInWindow = 0
  goodInWindow = 0
  outputInWindow = 0
  /** Requests per engine index. */
  readonly perInstance: number[]

  constructor(
    readonly name: string,
    engines: number,
    readonly durationMs: number,
    readonly slo: Slo,
  ) {
    this.perInstance = new Array<number>(engines).fill(0)
  }

  routed(p: PdPlacement): void {
    this.requests++
    this.perInstance[p.decode]!++
    if (p.prefill !== null) this.split++
  }

  done(r: VirtualResult | PdResult, split: boolean): void {
    this.finished++
    if (r.ttftMs >= 0) this.ttftMs.push(r.ttftMs)
    // A request of one output token has no gap between tokens: it counts for TTFT only.
    if (r.tpotMs >= 0) this.tpotMs.push(r.tpotMs)
    if (split && 'legs' in r && r.legs === 'pd') this.pulled++
    if (r.finishedMs <= this.durationMs && r.finishReason !== 'error') {
      this.completedInWindow++
      this.outputInWindow += r.outputTokens
      if (r.ttftMs >= 0 && r.ttftMs <= this.slo.ttftMs && (r.tpotMs < 0 || r.tpotMs <= this.slo.tpotMs)) this.goodInWindow++
    }
  }
}
