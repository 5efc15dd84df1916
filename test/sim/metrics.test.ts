import { describe, expect, it } from 'vitest'
import { VirtualFleet } from '../../src/sim/index.js'
import { eventually, fleet, get, metric, parsePrometheus, post, promptOf, scrape } from './helpers.js'

describe('/metrics', () => {
  it('parses as Prometheus text and counts what was sent, under vLLM names', async () => {
    const { urls } = await fleet({ kvBlocks: 4096 })
    const u = urls[0]!
    const sent = [
      { prompt: promptOf(800, 'm1'), max_tokens: 3 },
      { prompt: promptOf(800, 'm1'), max_tokens: 4 },
      { prompt: promptOf(333, 'm2'), max_tokens: 5 },
      { prompt: promptOf(800, 'm1'), max_tokens: 6 },
    ]
    const usages: any[] = []
    for (const body of sent) usages.push((await post(u, '/v1/completions', body)).body.usage)
    const chat = await post(u, '/v1/chat/completions', { messages: [{ role: 'user', content: 'count me' }] })
    usages.push(chat.body.usage)
    const sum = (f: (x: any) => number): number => usages.reduce((s, x) => s + f(x), 0)

    const r = await get(u, '/metrics')
    expect(r.headers.get('content-type')).toBe('text/plain; version=0.0.4; charset=utf-8')
    const m = parsePrometheus(r.text)
    const lbl = { model_name: 'sim-tiny', engine: '0' }
    expect(m.get('vllm:prompt_tokens_total')!.type).toBe('counter')
    expect(m.get('vllm:time_to_first_token_seconds')!.type).toBe('histogram')
    expect(metric(m, 'vllm:num_requests_running', lbl)).toBe(0)
    expect(metric(m, 'vllm:num_requests_waiting', lbl)).toBe(0)
    expect(metric(m, 'vllm:kv_cache_usage_perc', lbl)).toBe(0)
    expect(metric(m, 'vllm:prompt_tokens_total', lbl)).toBe(sum((x) => x.prompt_tokens))
    expect(metric(m, 'vllm:generation_tokens_total', lbl)).toBe(sum((x) => x.completion_tokens))
    expect(metric(m, 'vllm:prefix_cache_queries_total', lbl)).toBe(sum((x) => x.prompt_tokens))
    expect(metric(m, 'vllm:prefix_cache_hits_total', lbl)).toBe(sum((x) => x.prompt_tokens_details.cached_tokens))
    expect(metric(m, 'vllm:prefix_cache_hits_total', lbl)).toBeGreaterThan(1000)
    expect(metric(m, 'vllm:request_success_total', { ...lbl, finished_reason: 'length' })).toBe(4)
    expect(metric(m, 'vllm:request_success_total', { ...lbl, finished_reason: 'stop' })).toBe(1)
    expect(metric(m, 'vllm:request_success_total', { ...lbl, finished_reason: 'abort' })).toBe(0)
    expect(metric(m, 'vllm:time_to_first_token_seconds_count', lbl)).toBe(5)
    expect(metric(m, 'vllm:time_to_first_token_seconds_sum', lbl)).toBeGreaterThan(0)
    expect(metric(m, 'vllm:e2e_request_latency_seconds_count', lbl)).toBe(5)
    expect(metric(m, 'vllm:cache_config_info', { block_size: '16', num_gpu_blocks: '4096' })).toBe(1)
  })

  it('shows the running count and KV usage of requests in flight', async () => {
    const { urls } = await fleet()
    const inflight = Promise.all(
      Array.from({ length: 3 }, (_, i) => post(urls[0]!, '/v1/completions', { prompt: promptOf(500, `run${i}`), max_tokens: 600 })),
    )
    let usage = 0
    const sawThree = await eventually(async () => {
      const m = await scrape(urls[0]!)
      usage = metric(m, 'vllm:kv_cache_usage_perc')
      return metric(m, 'vllm:num_requests_running') === 3
    })
    expect(sawThree).toBe(true)
    expect(usage).toBeGreaterThan(0)
    await inflight
    expect(metric(await scrape(urls[0]!), 'vllm:num_requests_running')).toBe(0)
  })

  it('the virtual engine renders the same families', () => {
    const vf = new VirtualFleet({ instances: 2, profile: 'tiny' })
    vf.submit(1, { text: promptOf(100, 'v'), maxTokens: 2 })
    vf.run()
    const m = parsePrometheus(vf.metrics(1))
    expect(metric(m, 'vllm:generation_tokens_total')).toBe(2)
    expect(metric(parsePrometheus(vf.metrics(0)), 'vllm:generation_tokens_total')).toBe(0)
  })
})
