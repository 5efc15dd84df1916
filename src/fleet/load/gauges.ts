// The three gauges of a vLLM engine's /metrics that tell its load: requests running (in the
// batch) and waiting (queued), and how full its KV cache is. vLLM labels them per engine
// ({model_name, engine}); a data-parallel deployment exposes one label set per engine: the
// requests add up, the cache usage is the fullest engine's. vLLM writes them near the top of
// its page, so the start of the body usually tells them all.
import { Family, scanSamples } from './samples.js'

const RUNNING = new Family('vllm:num_requests_running')
const WAITING = new Family('vllm:num_requests_waiting')
const KV_USAGE = new Family('vllm:kv_cache_usage_perc')
/** The name before vLLM 0.9 (still exported, deprecated, by later ones). */
const GPU_USAGE = new Family('vllm:gpu_cache_usage_perc')

export interface EngineGauges {
  running: number
  waiting: number
  /** 0-1; undefined when the engine does not export it. */
  kvCacheUsage: number | undefined
}

export type GaugeRead =
  | { ok: true; gauges: EngineGauges }
  /** not_vllm: no vllm:num_requests_running at all; failed: a gauge missing or not a number. */
  | { ok: false; result: 'not_vllm' | 'failed'; reason: string }

function bad(name: string, raw: string): GaugeRead {
  return { ok: false, result: 'failed', reason: `${name} is not a number: ${JSON.stringify(raw.slice(0, 40))}` }
}

/**
 * The most requests an engine is believed to hold (the router's own limit on a figure, 2^32 - 1).
 * A page saying more, or a negative count, is broken: the scrape fails (counted, logged, the
 * instance on this router's own counts) rather than steering every request away from it.
 */
export const MAX_ENGINE_REQUESTS = 0xffffffff

function outOfRange(what: string, v: number): GaugeRead | undefined {
  if (v < 0) return { ok: false, result: 'failed', reason: `${what} is negative: ${v}` }
  if (v > MAX_ENGINE_REQUESTS) return { ok: false, result: 'failed', reason: `${what} is ${v}, more than ${MAX_ENGINE_REQUESTS} requests: not believed` }
  return undefined
}

/**
 * The load gauges from a /metrics body, or why they cannot be had from it. `final` false:
 * `body` is the start of one still arriving, and undefined means more is needed to tell.
 */
export function readEngineGauges(body: Buffer | string, final = true): GaugeRead | undefined {
  const buf = typeof body === 'string' ? Buffer.from(body) : body
  const running = scanSamples(buf, RUNNING, final)
  if (!running.complete) return undefined
  if (running.bad !== undefined) return bad(RUNNING.name, running.bad)
  if (running.count === 0) return { ok: false, result: 'not_vllm', reason: `no ${RUNNING.name} in /metrics (not a vLLM engine?)` }
  const waiting = scanSamples(buf, WAITING, final)
  if (!waiting.complete) return undefined
  if (waiting.bad !== undefined) return bad(WAITING.name, waiting.bad)
  if (waiting.count === 0) return { ok: false, result: 'failed', reason: `no ${WAITING.name} in /metrics` }
  let usage = KV_USAGE
  let kv = scanSamples(buf, usage, final)
  if (!kv.complete) return undefined
  if (kv.count === 0 && kv.bad === undefined) kv = scanSamples(buf, (usage = GPU_USAGE), final)
  if (kv.bad !== undefined) return bad(usage.name, kv.bad)
  // Each sample, not only the sum: a negative engine must not hide behind a busy one.
  if (running.min < 0) return outOfRange(RUNNING.name, running.min)!
  if (waiting.min < 0) return outOfRange(WAITING.name, waiting.min)!
  const range = outOfRange(RUNNING.name, running.sum) ?? outOfRange(WAITING.name, waiting.sum) ?? outOfRange(`${RUNNING.name} + ${WAITING.name}`, running.sum + waiting.sum)
  if (range !== undefined) return range
  return { ok: true, gauges: { running: running.sum, waiting: waiting.sum, kvCacheUsage: kv.count > 0 ? kv.max : undefined } }
}
