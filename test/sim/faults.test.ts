// Each fault does what it says; a client that goes away takes its sequence with it.
import net from 'node:net'
import { describe, expect, it } from 'vitest'
import { eventually, fleet, get, metric, post, promptOf, scrape, stream } from './helpers.js'

const chat = { messages: [{ role: 'user', content: 'fault?' }], max_tokens: 2 }

async function setFaults(url: string, body: object): Promise<void> {
  const r = await post(url, '/sim/faults', body)
  expect(r.status).toBe(200)
}

/** Reads an SSE response until the connection ends, however it ends. */
async function readUntilClosed(url: string, body: object): Promise<{ tokens: number; done: boolean; error: boolean }> {
  const res = await fetch(`${url}/v1/chat/completions`, { method: 'POST', body: JSON.stringify({ ...body, stream: true }) })
  let text = ''
  let error = false
  try {
    for await (const c of res.body as unknown as AsyncIterable<Uint8Array>) text += Buffer.from(c).toString()
  } catch {
    error = true
  }
  const tokens = text
    .split('\n\n')
    .filter((e) => e.startsWith('data: {'))
    .map((e) => JSON.parse(e.slice(6)))
    .reduce((n, c) => n + (c.choices[0]?.delta?.content ? c.choices[0].delta.content.length / 4 : 0), 0)
  return { tokens, done: text.includes('data: [DONE]'), error }
}

describe('faults', () => {
  it('answers a share of requests with 500 or 503 in the error shape', async () => {
    const { urls } = await fleet({ faults: { errorRate: 1, errorStatus: 503 } })
    const r = await post(urls[0]!, '/v1/chat/completions', chat)
    expect(r.status).toBe(503)
    expect(r.body.error.code).toBe(503)
    expect(r.headers.get('x-sim-instance')).toBe('sim-0')
    await setFaults(urls[0]!, { error_rate: 0.5, error_status: 500, seed: 42 })
    const statuses = []
    for (let i = 0; i < 40; i++) statuses.push((await post(urls[0]!, '/v1/chat/completions', chat)).status)
    const failed = statuses.filter((s) => s === 500).length
    expect(failed).toBeGreaterThan(5)
    expect(failed).toBeLessThan(35)
    expect(failed + statuses.filter((s) => s === 200).length).toBe(40)
    await setFaults(urls[0]!, {})
    expect((await post(urls[0]!, '/v1/chat/completions', chat)).status).toBe(200)
  })

  it('only on the instances it is given', async () => {
    const { urls } = await fleet({ instances: 2, faults: { errorRate: 1 }, faultInstances: [1] })
    expect((await post(urls[0]!, '/v1/chat/completions', chat)).status).toBe(200)
    expect((await post(urls[1]!, '/v1/chat/completions', chat)).status).toBe(500)
  })

  it('fails /health and /ping, and recovers', async () => {
    const { urls } = await fleet()
    await setFaults(urls[0]!, { health_fail: true })
    for (const p of ['/health', '/ping']) {
      const r = await get(urls[0]!, p)
      expect(r.status).toBe(503)
      expect(JSON.parse(r.text).error.code).toBe(503)
    }
    expect((await get(urls[0]!, '/sim/faults')).text).toContain('"health_fail":true')
    await setFaults(urls[0]!, {})
    expect((await get(urls[0]!, '/health')).status).toBe(200)
  })

  it('closes the connection after K streamed tokens, and the sequence is aborted', async () => {
    const { urls } = await fleet({ faults: { dropAfterTokens: 3 } })
    const r = await readUntilClosed(urls[0]!, { ...chat, max_tokens: 50 })
    expect(r.tokens).toBe(3)
    expect(r.done).toBe(false)
    expect(r.error).toBe(true)
    const nonStream = await fetch(`${urls[0]}/v1/chat/completions`, { method: 'POST', body: JSON.stringify({ ...chat, max_tokens: 50 }) }).then(
      (x) => x.text(),
      (err: Error) => err,
    )
    expect(nonStream).toBeInstanceOf(Error)
    expect(await eventually(async () => metric(await scrape(urls[0]!), 'vllm:request_success_total', { finished_reason: 'abort' }) === 2)).toBe(true)
    const m = await scrape(urls[0]!)
    expect(metric(m, 'vllm:num_requests_running')).toBe(0)
    expect(metric(m, 'vllm:kv_cache_usage_perc')).toBe(0)
  })

  it('never answers a hung request, and the engine never sees it', async () => {
    const { urls, workers } = await fleet({ faults: { hangRate: 1 } })
    const ac = new AbortController()
    const pending = fetch(`${urls[0]}/v1/chat/completions`, { method: 'POST', body: JSON.stringify(chat), signal: ac.signal })
    const winner = await Promise.race([pending.then(() => 'answered'), new Promise((r) => setTimeout(() => r('silent'), 300))])
    expect(winner).toBe('silent')
    expect(workers[0]!.engine.inFlight).toBe(0)
    ac.abort()
    await pending.catch(() => undefined)
    await setFaults(urls[0]!, {})
    expect((await post(urls[0]!, '/v1/chat/completions', chat)).status).toBe(200)
  })

  it('adds latency before scheduling', async () => {
    const { urls } = await fleet()
    const body = { messages: [{ role: 'user', content: 'delay me' }], max_tokens: 1 }
    // The model's TTFTs, from the worker's histogram: the client's include whatever a busy
    // machine adds, which made a plain request take 150 ms beside a 3 ms model TTFT.
    const ttftSum = async () => metric(await scrape(urls[0]!), 'vllm:time_to_first_token_seconds_sum') * 1000
    await stream(urls[0]!, '/v1/chat/completions', body)
    const plain = await ttftSum()
    await setFaults(urls[0]!, { delay_ms: 400 })
    const delayed = await stream(urls[0]!, '/v1/chat/completions', body)
    const delayedModel = (await ttftSum()) - plain
    expect(delayedModel - plain).toBeCloseTo(400, 3)
    // and the client did wait for it
    expect(delayed.ttftMs).toBeGreaterThan(delayedModel - 3)
  })

  it('refuses connections while down, then comes back on the same port', async () => {
    const { urls, workers } = await fleet()
    const port = workers[0]!.port
    await setFaults(urls[0]!, { down_ms: 600 })
    // Connect in the same tick as seeing the worker down: its restart timer cannot run before.
    // (Polling connects had to land within the 600 ms it stays down, which a busy machine can miss.)
    expect(await eventually(() => !workers[0]!.isListening)).toBe(true)
    const refused = await new Promise<boolean>((resolve) => {
      const s = net.connect(port, '127.0.0.1')
      s.once('connect', () => {
        s.destroy()
        resolve(false)
      })
      s.once('error', (e: NodeJS.ErrnoException) => resolve(e.code === 'ECONNREFUSED'))
    })
    expect(refused).toBe(true)
    const back = await eventually(async () => (await post(urls[0]!, '/v1/chat/completions', chat).catch(() => ({ status: 0 }))).status === 200, 5000)
    expect(back).toBe(true)
    expect(workers[0]!.port).toBe(port)
  })

  it('rejects bad fault settings with the error shape', async () => {
    const { urls } = await fleet()
    for (const body of [{ error_rate: 2 }, { error_status: 404 }, { drop_after_tokens: -1 }, { bogus: 1 }, [1]]) {
      const r = await post(urls[0]!, '/sim/faults', body)
      expect(r.status).toBe(400)
      expect(r.body.error.code).toBe(400)
    }
  })
})

describe('client disconnect', () => {
  it('aborts the sequence: the running count drops and its blocks are unpinned', async () => {
    const { urls } = await fleet()
    const ac = new AbortController()
    const res = await fetch(`${urls[0]}/v1/chat/completions`, {
      method: 'POST',
      body: JSON.stringify({ messages: [{ role: 'user', content: promptOf(300, 'bye') }], max_tokens: 5000, stream: true }),
      signal: ac.signal,
    })
    const reader = res.body!.getReader()
    let events = 0
    while (events < 3) {
      const { value } = await reader.read()
      events += Buffer.from(value!).toString().split('\n\n').length - 1
    }
    const during = await scrape(urls[0]!)
    expect(metric(during, 'vllm:num_requests_running')).toBe(1)
    expect(metric(during, 'vllm:kv_cache_usage_perc')).toBeGreaterThan(0)
    ac.abort()
    expect(await eventually(async () => metric(await scrape(urls[0]!), 'vllm:num_requests_running') === 0, 3000)).toBe(true)
    const after = await scrape(urls[0]!)
    expect(metric(after, 'vllm:kv_cache_usage_perc')).toBe(0)
    expect(metric(after, 'vllm:request_success_total', { finished_reason: 'abort' })).toBe(1)
    expect(metric(after, 'vllm:generation_tokens_total')).toBeLessThan(5000)
  })

  it('aborts a non-streaming request whose client leaves', async () => {
    const { urls } = await fleet()
    const ac = new AbortController()
    const p = fetch(`${urls[0]}/v1/completions`, {
      method: 'POST',
      body: JSON.stringify({ prompt: 'wait for me', max_tokens: 5000 }),
      signal: ac.signal,
    }).catch(() => undefined)
    expect(await eventually(async () => metric(await scrape(urls[0]!), 'vllm:num_requests_running') === 1)).toBe(true)
    ac.abort()
    await p
    expect(await eventually(async () => metric(await scrape(urls[0]!), 'vllm:num_requests_running') === 0, 3000)).toBe(true)
    expect(metric(await scrape(urls[0]!), 'vllm:request_success_total', { finished_reason: 'abort' })).toBe(1)
  })
})
