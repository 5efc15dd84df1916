// A /metrics body as large as a real vLLM server's, for bench/engine-load.bench.ts: the
// families vLLM v1 registers (vllm/v1/metrics/loggers.py: its gauges, counters and histograms
// with their bucket lists, labels {model_name, engine}), as prometheus_client renders them
// (counters as _total with a _created sample, histograms as _bucket/_count/_sum/_created), after
// the process and GC collectors prometheus_client adds and the HTTP metrics of
// prometheus-fastapi-instrumentator that vLLM's API server exposes. Values are made up but
// plausible; the sizes and the order are what matter here.

export interface FixtureOptions {
  model?: string
  /** Data-parallel engines: one label set per engine for every vllm: family. */
  engines?: number
  maxModelLen?: number
  running?: number
  waiting?: number
}

/** vLLM's build_1_2_5_buckets(max): 1, 2, 5, 10, 20, 50, ... up to max. */
function buckets125(max: number): number[] {
  const out: number[] = []
  for (let e = 1; ; e *= 10) {
    for (const m of [1, 2, 5]) {
      if (m * e > max) return out
      out.push(m * e)
    }
  }
}

const TTFT = [0.001, 0.005, 0.01, 0.02, 0.04, 0.06, 0.08, 0.1, 0.25, 0.5, 0.75, 1.0, 2.5, 5.0, 7.5, 10.0, 20.0, 40.0, 80.0, 160.0, 640.0, 2560.0]
const TPOT = [0.01, 0.025, 0.05, 0.075, 0.1, 0.15, 0.2, 0.3, 0.4, 0.5, 0.75, 1.0, 2.5, 5.0, 7.5, 10.0, 20.0, 40.0, 80.0]
const PREFILL_TOKEN = [0.001, 0.002, 0.005, 0.01, 0.02, 0.05, 0.1, 0.2, 0.5, 1.0]
const LATENCY = [0.3, 0.5, 0.8, 1.0, 1.5, 2.0, 2.5, 5.0, 10.0, 15.0, 20.0, 30.0, 40.0, 50.0, 60.0, 120.0, 240.0, 480.0, 960.0, 1920.0, 7680.0]
const ITERATION = [1, 8, 16, 32, 64, 128, 256, 512, 1024, 2048, 4096, 8192, 16384]
const PARAMS_N = [1, 2, 5, 10, 20]
const HTTP_HIGHR = [0.01, 0.025, 0.05, 0.075, 0.1, 0.25, 0.5, 0.75, 1, 1.5, 2, 2.5, 3, 3.5, 4, 4.5, 5, 7.5, 10, 30, 60]
const HTTP_LOWR = [0.1, 0.5, 1]
const HANDLERS = ['/v1/chat/completions', '/v1/completions', '/health', '/metrics', '/v1/models', '/tokenize']

/** prometheus_client's floatToGoString: 1.0, 0.25, and past six digits 1.700000123456e+09. */
function num(v: number): string {
  const s = Number.isInteger(v) ? `${v}.0` : String(v)
  const dot = s.indexOf('.')
  if (v <= 0 || dot <= 6) return s
  const mantissa = `${s[0]}.${s.slice(1, dot)}${s.slice(dot + 1)}`.replace(/[0.]+$/, '')
  return `${mantissa}e+0${dot - 1}`
}

class Out {
  text = ''
  family(name: string, type: string, help: string) {
    this.text += `# HELP ${name} ${help}\n# TYPE ${name} ${type}\n`
  }
  line(name: string, labels: string, v: number) {
    this.text += `${name}${labels ? `{${labels}}` : ''} ${num(v)}\n`
  }
}

export function vllmMetricsBody(o: FixtureOptions = {}): string {
  const model = o.model ?? 'meta-llama/Llama-3.1-8B-Instruct'
  const engines = Array.from({ length: o.engines ?? 1 }, (_, i) => i)
  const w = new Out()
  const created = 1.7e9 + 123.456
  // prometheus_client's default collectors.
  w.family('python_gc_objects_collected_total', 'counter', 'Objects collected during gc')
  for (const g of [0, 1, 2]) w.line('python_gc_objects_collected_total', `generation="${g}"`, 12_000 * (3 - g))
  w.family('python_gc_objects_uncollectable_total', 'counter', 'Uncollectable objects found during GC')
  for (const g of [0, 1, 2]) w.line('python_gc_objects_uncollectable_total', `generation="${g}"`, 0)
  w.family('python_gc_collections_total', 'counter', 'Number of times this generation was collected')
  for (const g of [0, 1, 2]) w.line('python_gc_collections_total', `generation="${g}"`, 900 / (g + 1))
  w.family('python_info', 'gauge', 'Python platform information')
  w.line('python_info', 'implementation="CPython",major="3",minor="12",patchlevel="9",version="3.12.9"', 1)
  w.family('process_virtual_memory_bytes', 'gauge', 'Virtual memory size in bytes.')
  w.line('process_virtual_memory_bytes', '', 9.8e10)
  w.family('process_resident_memory_bytes', 'gauge', 'Resident memory size in bytes.')
  w.line('process_resident_memory_bytes', '', 5.2e9)
  w.family('process_start_time_seconds', 'gauge', 'Start time of the process since unix epoch in seconds.')
  w.line('process_start_time_seconds', '', created)
  w.family('process_cpu_seconds_total', 'counter', 'Total user and system CPU time spent in seconds.')
  w.line('process_cpu_seconds_total', '', 4242.5)
  w.family('process_open_fds', 'gauge', 'Number of open file descriptors.')
  w.line('process_open_fds', '', 312)
  w.family('process_max_fds', 'gauge', 'Maximum number of open file descriptors.')
  w.line('process_max_fds', '', 1_048_576)

  const per = (e: number) => `model_name="${model}",engine="${e}"`
  const gauge = (name: string, help: string, v: (e: number) => number) => {
    w.family(name, 'gauge', help)
    for (const e of engines) w.line(name, per(e), v(e))
  }
  const counter = (name: string, help: string, v: (e: number) => number) => {
    w.family(`${name}_total`, 'counter', help)
    for (const e of engines) w.line(`${name}_total`, per(e), v(e))
    w.family(`${name}_created`, 'gauge', help)
    for (const e of engines) w.line(`${name}_created`, per(e), created)
  }
  const histogram = (name: string, help: string, bounds: number[], scale: number) => {
    w.family(name, 'histogram', help)
    for (const e of engines) {
      let acc = 0
      for (const b of bounds) {
        acc += Math.round(1000 / (1 + Math.abs(Math.log(b / scale))))
        w.line(`${name}_bucket`, `${per(e)},le="${num(b)}"`, acc)
      }
      w.line(`${name}_bucket`, `${per(e)},le="+Inf"`, acc)
      w.line(`${name}_count`, per(e), acc)
      w.line(`${name}_sum`, per(e), acc * scale)
    }
    w.family(`${name}_created`, 'gauge', help)
    for (const e of engines) w.line(`${name}_created`, per(e), created)
  }

  gauge('vllm:num_requests_running', 'Number of requests in model execution batches.', () => o.running ?? 12)
  gauge('vllm:num_requests_waiting', 'Number of requests waiting to be processed.', () => o.waiting ?? 3)
  gauge('vllm:gpu_cache_usage_perc', 'GPU KV-cache usage. 1 means 100 percent usage.DEPRECATED: Use vllm:kv_cache_usage_perc instead.', (e) => 0.41 + e / 100)
  counter('vllm:gpu_prefix_cache_queries', 'GPU prefix cache queries, in terms of number of queriedtokens. DEPRECATED: Use vllm:prefix_cache_queries instead.', () => 98_765_432)
  counter('vllm:gpu_prefix_cache_hits', 'GPU prefix cache hits, in terms of number of cached tokens. DEPRECATED: Use vllm:prefix_cache_hits instead.', () => 54_321_000)
  gauge('vllm:kv_cache_usage_perc', 'KV-cache usage. 1 means 100 percent usage.', (e) => 0.41 + e / 100)
  counter('vllm:prefix_cache_queries', 'Prefix cache queries, in terms of number of queried tokens.', () => 98_765_432)
  counter('vllm:prefix_cache_hits', 'Prefix cache hits, in terms of number of cached tokens.', () => 54_321_000)
  counter('vllm:num_preemptions', 'Cumulative number of preemption from the engine.', () => 17)
  counter('vllm:prompt_tokens', 'Number of prefill tokens processed.', () => 123_456_789)
  counter('vllm:generation_tokens', 'Number of generation tokens processed.', () => 23_456_789)
  w.family('vllm:request_success_total', 'counter', 'Count of successfully processed requests.')
  for (const e of engines) for (const r of ['stop', 'length', 'abort']) w.line('vllm:request_success_total', `${per(e)},finished_reason="${r}"`, r === 'stop' ? 81_234 : 1_234)
  w.family('vllm:request_success_created', 'gauge', 'Count of successfully processed requests.')
  for (const e of engines) for (const r of ['stop', 'length', 'abort']) w.line('vllm:request_success_created', `${per(e)},finished_reason="${r}"`, created)
  const lengths = buckets125(o.maxModelLen ?? 131_072)
  histogram('vllm:request_prompt_tokens', 'Number of prefill tokens processed.', lengths, 2000)
  histogram('vllm:request_generation_tokens', 'Number of generation tokens processed.', lengths, 300)
  histogram('vllm:iteration_tokens_total', 'Histogram of number of tokens per engine_step.', ITERATION, 512)
  histogram('vllm:request_max_num_generation_tokens', 'Histogram of maximum number of requested generation tokens.', lengths, 1000)
  histogram('vllm:request_params_n', 'Histogram of the n request parameter.', PARAMS_N, 1)
  histogram('vllm:request_params_max_tokens', 'Histogram of the max_tokens request parameter.', lengths, 1000)
  histogram('vllm:time_to_first_token_seconds', 'Histogram of time to first token in seconds.', TTFT, 0.2)
  histogram('vllm:time_per_output_token_seconds', 'Histogram of time per output token in seconds.', TPOT, 0.03)
  histogram('vllm:time_per_prefill_token_request_seconds', 'Time spent per token during prefill  phase in seconds', PREFILL_TOKEN, 0.0002)
  histogram('vllm:e2e_request_latency_seconds', 'Histogram of e2e request latency in seconds.', LATENCY, 8)
  histogram('vllm:request_queue_time_seconds', 'Histogram of time spent in WAITING phase for request.', LATENCY, 0.3)
  histogram('vllm:request_inference_time_seconds', 'Histogram of time spent in RUNNING phase for request.', LATENCY, 7)
  histogram('vllm:request_prefill_time_seconds', 'Histogram of time spent in PREFILL phase for request.', LATENCY, 0.4)
  histogram('vllm:request_decode_time_seconds', 'Histogram of time spent in DECODE phase for request.', LATENCY, 6)
  w.family('vllm:cache_config_info', 'gauge', 'Information of the LLMEngine CacheConfig')
  for (const e of engines) {
    w.line(
      'vllm:cache_config_info',
      `block_size="16",cache_dtype="auto",calculate_kv_scales="False",cpu_offload_gb="0",enable_prefix_caching="True",engine="${e}",gpu_memory_utilization="0.9",is_attention_free="False",num_cpu_blocks="None",num_gpu_blocks="29837",num_gpu_blocks_override="None",prefix_caching_hash_algo="builtin",sliding_window="None",swap_space="4",swap_space_bytes="4294967296"`,
      1,
    )
  }

  // prometheus-fastapi-instrumentator, on vLLM's API server.
  w.family('http_requests_total', 'counter', 'Total number of requests by method, status and handler.')
  for (const h of HANDLERS) for (const s of ['2xx', '4xx']) w.line('http_requests_total', `handler="${h}",method="${h === '/health' || h === '/metrics' || h === '/v1/models' ? 'GET' : 'POST'}",status="${s}"`, s === '2xx' ? 50_000 : 12)
  w.family('http_requests_created', 'gauge', 'Total number of requests by method, status and handler.')
  for (const h of HANDLERS) for (const s of ['2xx', '4xx']) w.line('http_requests_created', `handler="${h}",method="${h === '/health' || h === '/metrics' || h === '/v1/models' ? 'GET' : 'POST'}",status="${s}"`, created)
  for (const [name, help] of [
    ['http_request_size_bytes', 'Content length of incoming requests by handler. Only value of header is respected. Otherwise ignored. No percentile calculated. '],
    ['http_response_size_bytes', 'Content length of outgoing responses by handler. Only value of header is respected. Otherwise ignored. No percentile calculated. '],
  ] as const) {
    w.family(name, 'summary', help)
    for (const h of HANDLERS) {
      w.line(`${name}_count`, `handler="${h}"`, 50_000)
      w.line(`${name}_sum`, `handler="${h}"`, 1.2e8)
    }
    w.family(`${name}_created`, 'gauge', help)
    for (const h of HANDLERS) w.line(`${name}_created`, `handler="${h}"`, created)
  }
  w.family('http_request_duration_highr_seconds', 'histogram', 'Latency with many buckets but no API specific labels. Made for more accurate percentile calculations. ')
  let acc = 0
  for (const b of HTTP_HIGHR) w.line('http_request_duration_highr_seconds_bucket', `le="${num(b)}"`, (acc += 3000))
  w.line('http_request_duration_highr_seconds_bucket', 'le="+Inf"', acc)
  w.line('http_request_duration_highr_seconds_count', '', acc)
  w.line('http_request_duration_highr_seconds_sum', '', acc * 4.2)
  w.family('http_request_duration_highr_seconds_created', 'gauge', 'Latency with many buckets but no API specific labels. Made for more accurate percentile calculations. ')
  w.line('http_request_duration_highr_seconds_created', '', created)
  w.family('http_request_duration_seconds', 'histogram', 'Latency with only few buckets by handler. Made to be only used if aggregation by handler is important. ')
  for (const h of HANDLERS) {
    const m = h === '/health' || h === '/metrics' || h === '/v1/models' ? 'GET' : 'POST'
    let a = 0
    for (const b of HTTP_LOWR) w.line('http_request_duration_seconds_bucket', `handler="${h}",le="${num(b)}",method="${m}"`, (a += 10_000))
    w.line('http_request_duration_seconds_bucket', `handler="${h}",le="+Inf",method="${m}"`, a)
    w.line('http_request_duration_seconds_count', `handler="${h}",method="${m}"`, a)
    w.line('http_request_duration_seconds_sum', `handler="${h}",method="${m}"`, a * 3.1)
  }
  w.family('http_request_duration_seconds_created', 'gauge', 'Latency with only few buckets by handler. Made to be only used if aggregation by handler is important. ')
  for (const h of HANDLERS) w.line('http_request_duration_seconds_created', `handler="${h}",method="${h === '/health' || h === '/metrics' || h === '/v1/models' ? 'GET' : 'POST'}"`, created)
  return w.text
}
