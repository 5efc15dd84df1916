// What a trace shape generates: the rows of a hash-id trace (src/replay/hash-id-trace.ts),
// in arrival order, from time 0 of the service on, without end; `make-trace` cuts a window.
import type { WorkloadParam, WorkloadParams } from '../types.js'

export interface TraceRow {
  /** Arrival, ms from the start of the service (fractional; written rounded down). */
  at: number
  inputLength: number
  outputLength: number
  hashIds: number[]
}

export interface ShapeOptions {
  seed: number
  /** Tokens per hash id. */
  blockTokens: number
}

export interface TraceShape {
  name: string
  summary: string
  /** Knobs, as `--<flag>` of `make-trace`. */
  params: readonly WorkloadParam[]
  /** Rows in arrival order, forever; deterministic for (params, options). */
  generate(params: WorkloadParams, o: ShapeOptions): Iterable<TraceRow>
}
