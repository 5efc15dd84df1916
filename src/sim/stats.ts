// What an engine counts, as plain numbers (the virtual engine updates these millions of
// times a second; metrics.ts renders them in vLLM's Prometheus names on demand).

export class Histogram {
  readonly counts: Float64Array
  sum = 0
  count = 0

  constructor(readonly buckets: readonly number[]) {
    this.counts = new Float64Array(buckets.length)
  }

  observe(v: number): void {
    const b = this.buckets
    let i = 0
    while (i < b.length && v > b[i]!) i++
    if (i < b.length) this.counts[i]!++
    this.sum += v
    this.count++
  }
}

// vLLM's buckets (vllm/v1/metrics/loggers.py), so dashboards built on vLLM's series work.
export const TTFT_BUCKETS = [
  0.001, 0.005, 0.01, 0.02, 0.04, 0.06, 0.08, 0.1, 0.25, 0.5, 0.75, 1.0, 2.5, 5.0, 7.5, 10.0, 20.0, 40.0, 80.0,
  160.0, 640.0, 2560.0,
]
export const REQUEST_LATENCY_BUCKETS = [
  0.3, 0.5, 0.8, 1.0, 1.5, 2.0, 2.5, 5.0, 10.0, 15.0, 20.0, 30.0, 40.0, 50.0, 60.0, 120.0, 240.0, 480.0, 960.0,
  1920.0, 7680.0,
]

// vLLM's NIXL transfer-time buckets (vllm/distributed/kv_transfer/kv_connector/v1/nixl/stats.py).
export const XFER_TIME_BUCKETS = [0.001, 0.005, 0.01, 0.02, 0.04, 0.06, 0.08, 0.1, 0.2, 0.3, 0.5, 0.75, 1.0, 5.0]
// Its bytes buckets: 2 KiB to 8 GiB, every factor of 4.
export const XFER_BYTES_BUCKETS = Array.from({ length: 12 }, (_, i) => 2 ** (11 + 2 * i))

export class EngineStats {
  /** Prompt tokens looked up in the prefix cache, and those found (vLLM counts tokens). */
  prefixQueries = 0
  prefixHits = 0
  /** Prompt tokens of requests that reached their first token (cached ones included, as vLLM counts). */
  promptTokens = 0
  generationTokens = 0
  preemptions = 0
  steps = 0
  success = { stop: 0, length: 0, abort: 0, error: 0 }
  /** Prompt tokens actually computed (prefill chunks, recomputation after preemption included). */
  computedTokens = 0
  /** Decode legs: prompt tokens asked of a prefill instance at admission, and those that arrived. */
  externalQueries = 0
  externalTokens = 0
  /** Decode legs: KV pulled from a prefill instance, refused or unreachable, and asked with unusable parameters. */
  kvTransfers = 0
  kvTransferBytes = 0
  kvTransferFailures = 0
  kvInvalidParams = 0
  /** Prefill legs: blocks held for a decode, read by it, and expired unread. */
  kvHolds = 0
  kvHoldsRead = 0
  kvHoldsExpired = 0
  /** Simulated seconds. */
  readonly ttft = new Histogram(TTFT_BUCKETS)
  readonly e2e = new Histogram(REQUEST_LATENCY_BUCKETS)
  readonly queue = new Histogram(REQUEST_LATENCY_BUCKETS)
  /** KV transfers into this engine: simulated seconds and bytes each. */
  readonly xferTime = new Histogram(XFER_TIME_BUCKETS)
  readonly xferBytes = new Histogram(XFER_BYTES_BUCKETS)
}
