// What a workload generator or a trace yields, and how a generator describes its knobs.
import type { OpenAIApi } from '../core/key/openai-key.js'
import { OutOfRangeError } from '../core/errors.js'

/** One request as a client would send it, at a simulated arrival time. */
export interface TimedRequest {
  /** Arrival, in simulated milliseconds from the start of the run. */
  at: number
  /** Which endpoint it is sent to: /v1/chat/completions ('chat') or /v1/completions. */
  api: OpenAIApi
  /** The OpenAI request body (model, messages or prompt, max_tokens, prompt_cache_key …). */
  body: Record<string, unknown>
  /** The X-Amzn-SageMaker-Prefix-Aware-Id header, when the client sends one. */
  tenant?: string
}

/** A numeric knob of a workload, exposed as `--<flag>` on `prefix-router replay`. */
export interface WorkloadParam {
  flag: string
  description: string
  default: number
  min: number
  max: number
  integer: boolean
}

export type WorkloadParams = Readonly<Record<string, number>>

export interface GenerateOptions {
  seed: number
  /** Requests arrive in [0, durationMs). */
  durationMs: number
}

/** A stretch of arrival time a workload reports on its own (a rate step), [startMs, endMs). */
export interface Phase {
  label: string
  startMs: number
  endMs: number
}

/** What a workload's sizing note is computed against: the fleet a replay simulates. */
export interface FleetShape {
  instances: number
  kvBlocks: number
  blockSize: number
  maxNumSeqs: number
  /** The profile's floor of a decode step (ms): a request is in flight at least this per output token. */
  decodeStepMs: number
}

export interface Workload {
  name: string
  summary: string
  params: readonly WorkloadParam[]
  /** Requests in arrival order; deterministic for (params, seed, duration). */
  generate(params: WorkloadParams, opts: GenerateOptions): Iterable<TimedRequest>
  /** The run's length when `--duration` is not given, for workloads with a schedule of their own. */
  durationMs?(params: WorkloadParams): number
  /** Stretches of arrival time the report breaks out (one table each). */
  phases?(params: WorkloadParams, durationMs: number): Phase[]
  /** Lines the report prints before its tables: how the workload compares with the fleet. */
  sizing?(params: WorkloadParams, fleet: FleetShape): string[]
}

/** The defaults of `w` overridden by `given` (unknown keys are the caller's error to report). */
export function resolveParams(w: Workload, given: Readonly<Record<string, number>> = {}): Record<string, number> {
  const out: Record<string, number> = {}
  for (const p of w.params) {
    const v = given[p.flag] ?? p.default
    if (!Number.isFinite(v) || v < p.min || v > p.max || (p.integer && !Number.isInteger(v))) {
      throw new OutOfRangeError(p.flag, describeParam(p), v, `--${p.flag} must be ${describeParam(p)}; got ${v}`)
    }
    out[p.flag] = v
  }
  return out
}

export function describeParam(p: WorkloadParam): string {
  return `${p.integer ? 'an integer' : 'a number'} from ${p.min} to ${p.max}`
}
