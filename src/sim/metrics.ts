// Prometheus text exposition (format 0.0.4) of an engine's state under vLLM v1's metric
// names, help strings and labels ({model_name, engine}), as vllm/v1/metrics/loggers.py
// registers them. Counters are exposed as <name>_total, as prometheus_client does.
// Prefill/decode disaggregation adds vLLM's KV-connector series (vllm:nixl_*, external prefix
// cache, prompt tokens by source) and a few of the simulator's own (sim:*): the role, and
// the blocks a prefill instance holds. None share a name with what the router scrapes.
import type { Role } from '../config/disaggregation.js'
import type { SimEngine } from './engine.js'
import type { Histogram } from './stats.js'

export const PROMETHEUS_CONTENT_TYPE = 'text/plain; version=0.0.4; charset=utf-8'

function escapeLabel(v: string): string {
  return v.replace(/\\/g, '\\\\').replace(/\n/g, '\\n').replace(/"/g, '\\"')
}

function labels(pairs: Record<string, string>): string {
  return `{${Object.entries(pairs)
    .map(([k, v]) => `${k}="${escapeLabel(v)}"`)
    .join(',')}}`
}

function num(v: number): string {
  if (Number.isInteger(v)) return `${v}.0`
  return String(v)
}

class Writer {
  out = ''
  family(name: string, type: 'gauge' | 'counter' | 'histogram', help: string): void {
    this.out += `# HELP ${name} ${help}\n# TYPE ${name} ${type}\n`
  }
  sample(name: string, lbl: string, v: number): void {
    this.out += `${name}${lbl} ${num(v)}\n`
  }
  histogram(name: string, help: string, base: Record<string, string>, h: Histogram): void {
    this.family(name, 'histogram', help)
    let cum = 0
    for (let i = 0; i < h.buckets.length; i++) {
      cum += h.counts[i]!
      this.sample(`${name}_bucket`, labels({ ...base, le: num(h.buckets[i]!) }), cum)
    }
    this.sample(`${name}_bucket`, labels({ ...base, le: '+Inf' }), h.count)
    this.sample(`${name}_count`, labels(base), h.count)
    this.sample(`${name}_sum`, labels(base), h.sum)
  }
}

export interface MetricsContext {
  modelName: string
  engineIndex?: number
  /** The instance's role in a disaggregated fleet (default both). */
  role?: Role
}

/** vLLM's kv_role for each of our roles. */
const KV_ROLE: Record<Role, string> = { prefill: 'kv_producer', decode: 'kv_consumer', both: 'kv_both' }

export function renderMetrics(engine: SimEngine, ctx: MetricsContext): string {
  const base = { model_name: ctx.modelName, engine: String(ctx.engineIndex ?? 0) }
  const lbl = labels(base)
  const s = engine.stats
  const w = new Writer()
  w.family('vllm:num_requests_running', 'gauge', 'Number of requests in model execution batches.')
  w.sample('vllm:num_requests_running', lbl, engine.numRunning)
  w.family('vllm:num_requests_waiting', 'gauge', 'Number of requests waiting to be processed.')
  w.sample('vllm:num_requests_waiting', lbl, engine.numWaiting)
  w.family('vllm:kv_cache_usage_perc', 'gauge', 'KV-cache usage. 1 means 100 percent usage.')
  w.sample('vllm:kv_cache_usage_perc', lbl, engine.cache.usage)
  w.family('vllm:prefix_cache_queries_total', 'counter', 'Prefix cache queries, in terms of number of queried tokens.')
  w.sample('vllm:prefix_cache_queries_total', lbl, s.prefixQueries)
  w.family('vllm:prefix_cache_hits_total', 'counter', 'Prefix cache hits, in terms of number of cached tokens.')
  w.sample('vllm:prefix_cache_hits_total', lbl, s.prefixHits)
  w.family('vllm:num_preemptions_total', 'counter', 'Cumulative number of preemption from the engine.')
  w.sample('vllm:num_preemptions_total', lbl, s.preemptions)
  w.family('vllm:prompt_tokens_total', 'counter', 'Number of prefill tokens processed.')
  w.sample('vllm:prompt_tokens_total', lbl, s.promptTokens)
  w.family('vllm:generation_tokens_total', 'counter', 'Number of generation tokens processed.')
  w.sample('vllm:generation_tokens_total', lbl, s.generationTokens)
  w.family('vllm:request_success_total', 'counter', 'Count of successfully processed requests.')
  for (const reason of ['stop', 'length', 'abort', 'error'] as const) {
    w.sample('vllm:request_success_total', labels({ ...base, finished_reason: reason }), s.success[reason])
  }
  w.histogram('vllm:time_to_first_token_seconds', 'Histogram of time to first token in seconds.', base, s.ttft)
  w.histogram('vllm:e2e_request_latency_seconds', 'Histogram of e2e request latency in seconds.', base, s.e2e)
  w.histogram(
    'vllm:request_queue_time_seconds',
    'Histogram of time spent in WAITING phase for request.',
    base,
    s.queue,
  )
  w.family('vllm:prompt_tokens_by_source_total', 'counter', 'Number of prompt tokens by source.')
  const local = s.prefixQueries - s.prefixHits - s.externalTokens
  w.sample('vllm:prompt_tokens_by_source_total', labels({ ...base, source: 'local_compute' }), local)
  w.sample('vllm:prompt_tokens_by_source_total', labels({ ...base, source: 'local_cache_hit' }), s.prefixHits)
  w.sample('vllm:prompt_tokens_by_source_total', labels({ ...base, source: 'external_kv_transfer' }), s.externalTokens)
  w.family('vllm:prompt_tokens_cached_total', 'counter', 'Number of cached prompt tokens (local + external).')
  w.sample('vllm:prompt_tokens_cached_total', lbl, s.prefixHits + s.externalTokens)
  w.family(
    'vllm:external_prefix_cache_queries_total',
    'counter',
    'External prefix cache queries from KV connector cross-instance cache sharing, in terms of number of queried tokens.',
  )
  w.sample('vllm:external_prefix_cache_queries_total', lbl, s.externalQueries)
  w.family(
    'vllm:external_prefix_cache_hits_total',
    'counter',
    'External prefix cache hits from KV connector cross-instance cache sharing, in terms of number of cached tokens.',
  )
  w.sample('vllm:external_prefix_cache_hits_total', lbl, s.externalTokens)
  w.histogram('vllm:nixl_xfer_time_seconds', 'Histogram of transfer duration for NIXL KV Cache transfers.', base, s.xferTime)
  w.histogram('vllm:nixl_bytes_transferred', 'Histogram of bytes transferred per NIXL KV Cache transfers.', base, s.xferBytes)
  w.family('vllm:nixl_num_failed_transfers_total', 'counter', 'Number of failed NIXL KV Cache transfers.')
  w.sample('vllm:nixl_num_failed_transfers_total', lbl, s.kvTransferFailures)
  w.family(
    'vllm:nixl_num_kv_expired_reqs_total',
    'counter',
    'Number of requests that had their KV expire. NOTE: This metric is tracked on the P instance.',
  )
  w.sample('vllm:nixl_num_kv_expired_reqs_total', lbl, s.kvHoldsExpired)
  const role = ctx.role ?? 'both'
  w.family('sim:role_info', 'gauge', "The simulated instance's role in a disaggregated fleet, and the vLLM kv_role it stands for.")
  w.sample('sim:role_info', labels({ ...base, role, kv_role: KV_ROLE[role], kv_connector: 'NixlConnector' }), 1)
  w.family('sim:kv_held_requests', 'gauge', 'Prefill legs whose KV blocks are held for a decode instance.')
  w.sample('sim:kv_held_requests', lbl, engine.holds.size)
  w.family('sim:kv_held_blocks', 'gauge', 'KV blocks held for decode instances (counted in vllm:kv_cache_usage_perc).')
  w.sample('sim:kv_held_blocks', lbl, engine.holds.blocks)
  w.family('sim:kv_holds_total', 'counter', 'Prefill legs that held their KV blocks for a decode instance.')
  w.sample('sim:kv_holds_total', lbl, s.kvHolds)
  w.family('sim:kv_holds_read_total', 'counter', 'Held KV blocks read by a decode instance.')
  w.sample('sim:kv_holds_read_total', lbl, s.kvHoldsRead)
  w.family(
    'sim:kv_transfer_invalid_params_total',
    'counter',
    'Decode legs whose kv_transfer_params vLLM cannot use (no remote_block_ids, a remote_* key missing): prefilled locally.',
  )
  w.sample('sim:kv_transfer_invalid_params_total', lbl, s.kvInvalidParams)
  const c = engine.config
  w.family('vllm:cache_config_info', 'gauge', 'Information of the LLMEngine CacheConfig')
  w.sample(
    'vllm:cache_config_info',
    labels({
      block_size: String(c.blockSize),
      cache_dtype: 'auto',
      enable_prefix_caching: 'True',
      engine: base.engine,
      num_cpu_blocks: 'None',
      num_gpu_blocks: String(c.kvBlocks),
    }),
    1,
  )
  return w.out
}
