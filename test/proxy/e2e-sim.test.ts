// End to end: real clients (the openai SDK, curl) → the router → the project's simulated
// vLLM workers, all over loopback.
import { execFile } from 'node:child_process'
import http2 from 'node:http2'
import { promisify } from 'node:util'
import OpenAI from 'openai'
import { afterEach, describe, expect, it } from 'vitest'
import { openAIRequest } from '../../src/core/key/openai-key.js'
import type { ProxyServer } from '../../src/proxy/proxy.js'
import { Router } from '../../src/core/router.js'
import { resolveSim, SimWorker, startSimFleet, type SimFleet } from '../../src/sim/index.js'
import { GatedClock } from '../helpers/gated-clock.js'
import { chat, closeRouter, h2Request, post, startRouter, totalInFlight, until } from './helpers.js'

const run = promisify(execFile)
let fleet: SimFleet | undefined
let router: ProxyServer | undefined
afterEach(async () => {
  await closeRouter(router, 5000)
  await fleet?.close()
  router = undefined
  fleet = undefined
})

/**
 * 24 documents, 6 of which the consistent hash places on `stuck` (dry runs of a router with the
 * same instances; the ring depends on their URLs, whose ports are random), spread through the 24.
 */
function documents(urls: string[], stuck: string): string[] {
  const dry = new Router({ instances: urls.map((id) => ({ id })), strategy: 'longest_prefix', placement: 'hash' })
  const home: string[] = []
  const elsewhere: string[] = []
  for (let d = 0; (home.length < 6 || elsewhere.length < 18) && d < 10_000; d++) {
    const body = chat(`document ${d}: ${'a paragraph of its own text. '.repeat(20)}${d}`, { model: MODEL, max_tokens: 2 })
    const { text, anchor } = openAIRequest('chat', Buffer.from(body), 65_536)
    const lease = dry.pick(text, anchor === undefined ? {} : { anchor })
    lease.release()
    if (lease.instance === stuck) {
      if (home.length < 6) home.push(body)
    } else if (elsewhere.length < 18) elsewhere.push(body)
  }
  dry.close()
  return Array.from({ length: 24 }, (_, i) => (i % 4 === 1 ? home.shift()! : elsewhere.shift()!))
}

async function setup(n: number, overrides: Record<string, unknown> = {}, sim: Record<string, unknown> = {}) {
  fleet = await startSimFleet({ instances: n, profile: 'tiny', ...sim })
  router = await startRouter(fleet.urls, overrides)
  return { fleet, router }
}


/** Like setup(), on tiny-profile workers that generate nothing until `open()`. */
async function setupGated(n: number, overrides: Record<string, unknown> = {}): Promise<{ fleet: SimFleet; router: ProxyServer; open: () => void }> {
  const sim = resolveSim({ profile: 'tiny' })
  const clocks = Array.from({ length: n }, () => new GatedClock())
  const workers = clocks.map((clock, i) => new SimWorker({ id: `sim-${i}`, index: i, sim, clock }))
  fleet = {
    urls: [],
    workers,
    close: async () => {
      await Promise.all(workers.map((w) => w.close()))
    },
  }
  for (const w of workers) await w.start()
  fleet.urls = workers.map((w) => w.url)
  router = await startRouter(fleet.urls, overrides)
  return { fleet, router, open: () => clocks.forEach((c) => c.open()) }
}

const MODEL = 'sim-tiny'
const longSystem = 'Answer as the ACME support desk would, politely and precisely. '.repeat(100)

describe('through the router to simulated vLLM workers', () => {
  it('the openai SDK reads non-streaming and streaming answers', async () => {
    const { router } = await setup(3)
    const client = new OpenAI({ baseURL: `${router.url}/v1`, apiKey: 'unused' })
    const msgs = [
      { role: 'system' as const, content: longSystem },
      { role: 'user' as const, content: 'Say hello.' },
    ]
    const done = await client.chat.completions.create({ model: MODEL, messages: msgs, max_tokens: 8 })
    expect(done.choices[0]!.message.content!.length).toBeGreaterThan(0)
    expect(done.usage?.completion_tokens).toBe(8)
    const stream = await client.chat.completions.create({ model: MODEL, messages: msgs, max_tokens: 8, stream: true, stream_options: { include_usage: true } })
    let text = ''
    let finish: string | null = null
    let usage: unknown
    for await (const chunk of stream) {
      text += chunk.choices[0]?.delta.content ?? ''
      finish = chunk.choices[0]?.finish_reason ?? finish
      usage = chunk.usage ?? usage
    }
    expect(text).toBe(done.choices[0]!.message.content)
    expect(finish).toBe('length')
    // The second request with the same long prefix hit the first one's cache: same instance.
    expect((usage as { prompt_tokens_details: { cached_tokens: number } }).prompt_tokens_details.cached_tokens).toBeGreaterThan(100)
    const completion = await client.completions.create({ model: MODEL, prompt: 'Once upon a time', max_tokens: 4 })
    expect(completion.choices[0]!.text.length).toBeGreaterThan(0)
  })

  it('curl --http2-prior-knowledge gets an answer over h2c', async () => {
    const { router } = await setup(2)
    const { stdout } = await run('curl', ['-s', '--http2-prior-knowledge', '-w', '\\n%{http_version} %{http_code}', `${router.url}/v1/chat/completions`, '-H', 'content-type: application/json', '-d', chat('hello', { model: MODEL, max_tokens: 4 })])
    const [body, status] = stdout.split('\n')
    expect(status).toBe('2 200')
    expect(JSON.parse(body!)).toMatchObject({ object: 'chat.completion', model: MODEL })
  })

  it('many concurrent streams on one HTTP/2 connection', async () => {
    const { router } = await setup(2)
    const session = http2.connect(router.url)
    try {
      const one = (i: number) => h2Request(session, '/v1/chat/completions', chat(`q${i}`, { model: MODEL, stream: true, max_tokens: 8 }))
      const results = await Promise.all(Array.from({ length: 100 }, (_, i) => one(i)))
      expect(results.every((r) => r.status === 200 && r.body.trimEnd().endsWith('data: [DONE]'))).toBe(true)
    } finally {
      session.close()
    }
  })

  it('a LoRA adapter loaded on 2 of 4 instances only ever reaches those 2', async () => {
    const { fleet, router } = await setup(4)
    for (const url of fleet.urls.slice(0, 2)) {
      const r = await post(`${url}/v1/load_lora_adapter`, JSON.stringify({ lora_name: 'sql-lora', lora_path: '/adapters/sql' }))
      expect(r.status).toBe(200)
    }
    for (const ep of router.endpoints()) await ep.owner!.probe() // what the periodic model refresh does
    const models = (await (await fetch(`${router.url}/v1/models`)).json()) as { data: { id: string; parent: string | null }[] }
    expect(models.data).toContainEqual(expect.objectContaining({ id: 'sql-lora', parent: MODEL }))
    const allowed = new Set(fleet.urls.slice(0, 2))
    const seen = new Set<string>()
    for (let i = 0; i < 40; i++) {
      const r = await post(`${router.url}/v1/chat/completions`, chat(`prompt ${i}`, { model: 'sql-lora', max_tokens: 2 }))
      expect(r.status).toBe(200)
      seen.add(r.headers.get('x-prefix-router-instance')!)
    }
    expect([...seen].every((u) => allowed.has(u))).toBe(true)
    expect(seen.size).toBe(2)
    // The base model still spreads over all four.
    const base = new Set<string>()
    for (let i = 0; i < 60; i++) base.add((await post(`${router.url}/v1/chat/completions`, chat(`p${i}`, { model: MODEL, max_tokens: 1 }))).headers.get('x-prefix-router-instance')!)
    expect(base.size).toBe(4)
  })

  it('a reload that changes the strategy while 50 streams are open drops none of them', async () => {
    // The workers hold every token until the reload is done: on a slowed clock instead, the first
    // streams could finish before the last ones were sent whenever the machine was busy.
    const { router, open } = await setupGated(3, { routing: { strategy: 'prefix_aware' } })
    const client = new OpenAI({ baseURL: `${router.url}/v1`, apiKey: 'unused', maxRetries: 0 })
    const streams = Array.from({ length: 50 }, (_, i) =>
      (async () => {
        const s = await client.chat.completions.create({ model: MODEL, messages: [{ role: 'user', content: `stream ${i}` }], max_tokens: 6, stream: true })
        let finish: string | null = null
        for await (const c of s) finish = c.choices[0]?.finish_reason ?? finish
        return finish
      })(),
    )
    try {
      await until(() => totalInFlight(router) === 50, 50_000, '50 open streams')
      const before = router.endpoint(undefined)!.routing.strategy
      const result = router.reload({ ...router.config, routing: { ...router.config.routing, strategy: 'least_outstanding_requests' } })
      expect(result.restartRequired).toEqual([])
      expect(before).toBe('prefix_aware')
      expect(router.endpoint(undefined)!.routing.strategy).toBe('least_outstanding_requests')
      const after = post(`${router.url}/v1/chat/completions`, chat('after', { model: MODEL, max_tokens: 1 }))
      // routed while all 50 are still open
      await until(() => totalInFlight(router) === 51, 50_000, 'the request after the reload')
      open()
      expect((await after).headers.get('x-prefix-router-decision')).toBe('least_outstanding_requests')
      expect(await Promise.all(streams)).toEqual(Array(50).fill('length'))
    } finally {
      open()
    }
  }, 60_000)

  it('a client that disconnects drops the simulator’s running count', async () => {
    const { fleet, router } = await setup(1, {}, { timeScale: 0.02 })
    const ac = new AbortController()
    const res = await fetch(`${router.url}/v1/chat/completions`, { method: 'POST', body: chat('long answer', { model: MODEL, max_tokens: 500, stream: true }), signal: ac.signal })
    const reader = res.body!.getReader()
    await reader.read() // the stream has started
    const engine = fleet.workers[0]!.engine
    await until(() => engine.numRunning === 1, 3000, 'running')
    ac.abort()
    await until(() => engine.numRunning === 0, 3000, 'the simulator aborted the sequence')
    expect(totalInFlight(router)).toBe(0)
  })

  it('a worker that drops the connection mid-stream: the client gets an error event, the lease is released', async () => {
    const { router } = await setup(1, {}, { faults: { dropAfterTokens: 3 } })
    const res = await fetch(`${router.url}/v1/chat/completions`, { method: 'POST', body: chat('x', { model: MODEL, max_tokens: 20, stream: true }) })
    const text = await res.text()
    const events = text.trim().split('\n\n')
    expect(events.at(-1)).toMatch(/^data: \{"error":\{"message":"upstream stream ended early/)
    expect(totalInFlight(router)).toBe(0)
  })

  it('metrics: requests by instance and status, TTFB, and each instance’s KV-cache hit ratio', async () => {
    const { router } = await setup(2, { routing: { strategy: 'prefix_aware' }, discovery: { modelsIntervalMs: 0, metricsIntervalMs: 50 } })
    for (let i = 0; i < 3; i++) await post(`${router.url}/v1/chat/completions`, chat(longSystem, { model: MODEL, max_tokens: 2 }))
    // The hit ratio comes from the router's next scrape of the workers, 50 ms apart when the
    // machine is idle and later when it is busy: wait for the one that saw all 3 requests
    // (1 miss, 2 hits) rather than for a fixed time.
    const hitRatio = (t: string) => Number(/prefix_router_instance_kv_cache_hit_ratio\{endpoint="default",instance="[^"]+"\} ([\d.]+)/.exec(t)?.[1] ?? 0)
    let text = ''
    await until(async () => hitRatio((text = await (await fetch(`${router.adminUrl}/metrics`)).text())) > 0.5, 30_000, 'a scrape that saw the 3 requests')
    expect(text).toMatch(/prefix_router_requests_total\{endpoint="default",instance="http:\/\/127\.0\.0\.1:\d+",strategy="prefix_aware",status="200"\} 3/)
    expect(text).toMatch(/prefix_router_upstream_ttfb_seconds_count\{instance="[^"]+"\} 3/)
    expect(text).toMatch(/prefix_router_routing_decision_seconds_count\{strategy="prefix_aware"\} 3/)
    expect(text).toMatch(/prefix_router_request_duration_seconds_count\{endpoint="default",status="200"\} 3/)
    expect(text).toMatch(/prefix_router_in_flight\{endpoint="default",instance="[^"]+"\} 0/)
    expect(hitRatio(text)).toBeGreaterThan(0.5) // 2 of 3 identical long prompts hit
    const report = (await (await fetch(`${router.adminUrl}/admin/instances`)).json()) as { endpoints: { instances: { requests: number; share: number; models: string[] }[] }[] }
    const insts = report.endpoints[0]!.instances
    expect(insts.reduce((n, i) => n + i.requests, 0)).toBe(3)
    expect(insts.some((i) => i.share === 1)).toBe(true)
    expect(insts[0]!.models).toEqual([MODEL])
  })

  it('longest_prefix keeps a conversation on one worker and sizes its index from the worker’s KV capacity', async () => {
    const { fleet, router } = await setup(4, { routing: { strategy: 'longest_prefix', prefixLength: 65536 }, discovery: { modelsIntervalMs: 0, metricsIntervalMs: 60_000 } })
    const client = new OpenAI({ baseURL: `${router.url}/v1`, apiKey: 'unused' })
    for (let c = 0; c < 6; c++) {
      const messages: { role: 'system' | 'user' | 'assistant'; content: string }[] = [{ role: 'system', content: `Conversation ${c}. ${longSystem}` }]
      let home: string | undefined
      for (let turn = 0; turn < 4; turn++) {
        messages.push({ role: 'user', content: `turn ${turn}: ${'tell me more about the order status. '.repeat(10)}` })
        const { data, response } = await client.chat.completions.create({ model: MODEL, messages, max_tokens: 8 }).withResponse()
        const where = response.headers.get('x-prefix-router-instance')!
        expect(response.headers.get('x-prefix-router-decision')).toBe('target')
        home ??= where
        expect(where).toBe(home)
        if (turn > 0) expect(data.usage!.prompt_tokens_details!.cached_tokens).toBeGreaterThan(0)
        messages.push({ role: 'assistant', content: data.choices[0]!.message.content! })
      }
    }
    const report = (await (await fetch(`${router.adminUrl}/admin/instances`)).json()) as { endpoints: { router: { indexEntries: number }; instances: { indexBlocks: number }[] }[] }
    const ep = report.endpoints[0]!
    expect(ep.router.indexEntries).toBeGreaterThan(0)
    // tiny profile: 8,192 KV blocks of 16 tokens, at 4 bytes a token, in 64-byte index blocks
    expect(ep.instances.map((i) => i.indexBlocks)).toEqual(Array(fleet.urls.length).fill(8192))
  })

  it('longest_prefix with placement: balanced keeps new prompts off a stuck worker; hash placement does not', async () => {
    // Worker 0 hangs every request: whatever reaches it stays in flight there.
    const tryPlacement = async (placement: 'hash' | 'balanced') => {
      const { fleet, router } = await setup(4, { routing: { strategy: 'longest_prefix', placement }, debugHeaders: true })
      const stuck = fleet.urls[0]!
      expect((await post(`${stuck}/sim/faults`, JSON.stringify({ hang_rate: 1 }))).status).toBe(200)
      const stuckInFlight = () => [...router.endpoints()][0]!.router.instances().find((i) => i.id === stuck)!.inFlight
      const aborts: AbortController[] = []
      let toStuck = 0
      for (const body of documents(fleet.urls, stuck)) {
        const d = aborts.length
        const ac = new AbortController()
        aborts.push(ac)
        let answered = false
        void fetch(`${router.url}/v1/chat/completions`, { method: 'POST', body, headers: { 'content-type': 'application/json' }, signal: ac.signal }).then(
          () => void (answered = true),
          () => undefined,
        )
        // A request that reaches the stuck worker never answers and stays in flight there.
        await until(() => answered || stuckInFlight() > toStuck, 10_000, `request ${d} answered or stuck`)
        if (!answered) toStuck++
      }
      for (const ac of aborts) ac.abort()
      await until(() => totalInFlight(router) === 0, 5000, 'in-flight back to 0 after the aborts')
      await router.close()
      await fleet.close()
      return toStuck
    }
    // Six of the 24 documents hash to the stuck worker (chosen by a dry run on the same ring).
    expect(await tryPlacement('hash')).toBeGreaterThan(2)
    expect(await tryPlacement('balanced')).toBeLessThanOrEqual(1) // at most the first, while all were idle
    router = undefined
    fleet = undefined
  })

  it('forwards to h2c upstreams', async () => {
    const { fleet, router } = await setup(2, { upstream: { protocol: 'h2c' } }, { h2c: true })
    for (let i = 0; i < 5; i++) {
      const r = await post(`${router.url}/v1/chat/completions`, chat(`h2c ${i}`, { model: MODEL, max_tokens: 2 }))
      expect(r.status).toBe(200)
      expect(fleet.urls).toContain(r.headers.get('x-prefix-router-instance'))
    }
  })
})
