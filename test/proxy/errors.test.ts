// Bad input and upstream faults: each gets a clear status and an OpenAI-shaped error, the
// process stays up, and the in-flight counters return to 0 (checked after every test).
import http from 'node:http'
import net from 'node:net'
import { describe, expect, it } from 'vitest'
import { chat, post, startRouter, startStub, totalInFlight, type Stub, until, useStubFleet } from './helpers.js'

const ctx = useStubFleet()
const fleet = ctx.fleet

function errorOf(text: string): { message: string; type: string; code: string } {
  const body = JSON.parse(text) as { error: { message: string; type: string; code: string } }
  expect(typeof body.error.message).toBe('string')
  return body.error
}

/** Raw bytes over TCP: what the server answers, and whether it closed the connection. */
function raw(url: string, data: string | Buffer, waitMs = 3000): Promise<{ text: string; closed: boolean }> {
  const { hostname, port } = new URL(url)
  return new Promise((resolve) => {
    const sock = net.connect(Number(port), hostname)
    let text = ''
    let closed = false
    const done = () => resolve({ text, closed })
    const timer = setTimeout(() => {
      sock.destroy()
      done()
    }, waitMs)
    sock.on('data', (d) => (text += d.toString('latin1')))
    sock.on('close', () => {
      closed = true
      clearTimeout(timer)
      done()
    })
    sock.on('error', () => undefined)
    sock.write(data)
  })
}

describe('bad input', () => {
  it('malformed JSON → 400', async () => {
    const r = await fleet(2)
    const res = await post(`${r.url}/v1/chat/completions`, '{"messages": [')
    expect(res.status).toBe(400)
    expect(errorOf(res.text)).toMatchObject({ type: 'invalid_request_error', code: 'invalid_json' })
  })

  it('a chat body without messages → 400; a completion without prompt → 400', async () => {
    const r = await fleet(2)
    const a = await post(`${r.url}/v1/chat/completions`, '{"model":"m"}')
    expect(a.status).toBe(400)
    expect(errorOf(a.text).code).toBe('missing_messages')
    const b = await post(`${r.url}/v1/completions`, '{"model":"m"}')
    expect(b.status).toBe(400)
    expect(errorOf(b.text).code).toBe('missing_prompt')
    const c = await post(`${r.url}/v1/chat/completions`, '[1,2]')
    expect(c.status).toBe(400)
    const d = await post(`${r.url}/v1/chat/completions`, '{"messages":[{"content":"no role"}]}')
    expect(errorOf(d.text).message).toMatch(/messages\[0\] must be an object with a string 'role'/)
  })

  it('a body over the limit → 413 without reading the rest, and the connection closes', async () => {
    const r = await fleet(1, { limits: { maxBodyBytes: 4096 } })
    const { text, closed } = await raw(
      r.url,
      'POST /v1/chat/completions HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\nContent-Length: 104857600\r\n\r\n{"messages":',
    )
    expect(text).toMatch(/^HTTP\/1\.1 413 /)
    expect(text).toMatch(/"code":"request_too_large"/)
    expect(closed).toBe(true)
    expect(ctx.stubs[0]!.seen.filter((s) => s.method === 'POST')).toHaveLength(0)
  })

  it('a chunked body that grows over the limit → 413, on both APIs', async () => {
    const r = await fleet(1, { limits: { maxBodyBytes: 4096 }, routing: { prefixLength: 1024 } })
    const big = Buffer.alloc(10_000, 97)
    for (const path of ['/v1/chat/completions', '/invocations']) {
      const res = await fetch(`${r.url}${path}`, { method: 'POST', body: new Blob([big]).stream(), duplex: 'half' } as RequestInit).catch((e: Error) => e)
      if (res instanceof Error) throw res
      expect(res.status, path).toBe(413)
    }
  })

  it('slow headers → 408', async () => {
    const r = await fleet(1, { limits: { headersTimeoutMs: 300 } })
    const { text } = await raw(r.url, 'POST /v1/chat/completions HTTP/1.1\r\nHost: x\r\n', 5000)
    expect(text).toMatch(/^HTTP\/1\.1 408 /)
  })

  it('a bad tenant id → 400', async () => {
    const r = await fleet(2)
    for (const bad of ['', 'x'.repeat(65), 'caf\u00e9']) {
      const res = await fetch(`${r.url}/v1/chat/completions`, {
        method: 'POST',
        body: chat('x'),
        headers: { 'x-amzn-sagemaker-prefix-aware-id': Buffer.from(bad, 'utf8').toString('latin1') },
      })
      expect(res.status, JSON.stringify(bad)).toBe(400)
      expect(errorOf(await res.text()).code).toBe('invalid_tenant')
    }
    const inv = await post(`${r.url}/invocations`, 'abc', { 'x-amzn-sagemaker-prefix-aware-id': 'x'.repeat(65) })
    expect(inv.status).toBe(400)
    const key = await post(`${r.url}/v1/chat/completions`, chat('x', { prompt_cache_key: 'k'.repeat(65) }))
    expect(key.status).toBe(400)
  })

  it('unknown endpoint, path or model → 404; wrong method → 405', async () => {
    ctx.stubs = [
      await startStub('m', (req, res) => {
        if (req.url === '/v1/models') {
          res.writeHead(200, { 'content-type': 'application/json' })
          return res.end(JSON.stringify({ object: 'list', data: [{ id: 'llama' }] }))
        }
        res.writeHead(200)
        res.end('{}')
      }),
    ]
    ctx.router = await startRouter([ctx.stubs[0]!.url])
    const ep = await post(`${ctx.router.url}/endpoints/nope/invocations`, 'x')
    expect(ep.status).toBe(404)
    expect(errorOf(ep.text).code).toBe('endpoint_not_found')
    const path = await post(`${ctx.router.url}/v2/whatever`, 'x')
    expect(path.status).toBe(404)
    const escape = await post(`${ctx.router.url}/endpoints/%zz/invocations`, 'x')
    expect(escape.status).toBe(404)
    const model = await post(`${ctx.router.url}/v1/chat/completions`, JSON.stringify({ model: 'gpt-9', messages: [{ role: 'user', content: 'x' }] }))
    expect(model.status).toBe(404)
    expect(errorOf(model.text)).toMatchObject({ code: 'model_not_found', message: "The model 'gpt-9' does not exist on endpoint 'default'." })
    const ok = await post(`${ctx.router.url}/v1/chat/completions`, JSON.stringify({ model: 'llama', messages: [{ role: 'user', content: 'x' }] }))
    expect(ok.status).toBe(200)
    const get = await fetch(`${ctx.router.url}/v1/chat/completions`)
    expect(get.status).toBe(405)
    expect(get.headers.get('allow')).toBe('POST')
  })
})

describe('upstream faults', () => {
  it('every instance down → 503 with Retry-After, and traffic resumes when one comes back', async () => {
    const r = await fleet(2, { health: { intervalMs: 100, timeoutMs: 500 } })
    const port = new URL(ctx.stubs[0]!.url).port
    await Promise.all(ctx.stubs.map((s) => s.close()))
    const first = await post(`${r.url}/v1/chat/completions`, chat('x'))
    expect(first.status).toBe(503)
    expect(first.headers.get('retry-after')).toMatch(/^\d+$/)
    expect(errorOf(first.text).code).toBe('no_healthy_instance')
    const again = await post(`${r.url}/v1/chat/completions`, chat('y'))
    expect(again.status).toBe(503)
    // The router itself is alive (SageMaker's /ping) but has nothing healthy to offer (/health).
    expect((await fetch(`${r.url}/ping`)).status).toBe(200)
    const health = await fetch(`${r.url}/health`)
    expect(health.status).toBe(503)
    expect(await health.json()).toEqual({ status: 'unavailable', healthyInstances: 0 })
    // One instance comes back on its old port; the health probe notices.
    const server = http.createServer((req, res) => {
      req.resume()
      req.on('end', () => {
        res.writeHead(200, { 'content-type': 'application/json' })
        res.end('{"revived":true}')
      })
    })
    await new Promise<void>((res) => server.listen(Number(port), '127.0.0.1', res))
    try {
      await until(async () => (await post(`${r.url}/v1/chat/completions`, chat('z'))).status === 200, 5000, 'recovery')
      expect(await (await fetch(`${r.url}/health`)).json()).toEqual({ status: 'ok', healthyInstances: 1 })
    } finally {
      server.closeAllConnections()
      server.close()
    }
  })

  it('a refused connection retries on another instance and marks the first down', async () => {
    const r = await fleet(3)
    const dead = ctx.stubs[0]!
    await dead.close()
    // Keys until one lands on the dead instance (its place on the ring follows its random port,
    // so a fixed handful of keys can miss it): that request is retried elsewhere.
    let retried = false
    for (let i = 0; i < 200 && !retried; i++) {
      const res = await post(`${r.url}/v1/chat/completions`, chat(`q${i}`))
      expect(res.status).toBe(200)
      expect(res.headers.get('x-prefix-router-instance')).not.toBe(dead.url)
      retried = Number(res.headers.get('x-prefix-router-retries')) > 0
    }
    expect(retried).toBe(true)
    const report = (await (await fetch(`${r.adminUrl}/admin/instances`)).json()) as { endpoints: { instances: { id: string; healthy: boolean; lastError: string | null }[] }[] }
    const d = report.endpoints[0]!.instances.find((i) => i.id === dead.url)!
    expect(d.healthy).toBe(false)
    expect(d.lastError).toMatch(/connection failed/)
  })

  it('an upstream that closes mid-stream: the client sees the stream end with an error event', async () => {
    ctx.stubs = [
      await startStub('drop', (req, res) => {
        if (req.url !== '/v1/chat/completions') {
          res.writeHead(200)
          return res.end()
        }
        res.writeHead(200, { 'content-type': 'text/event-stream' })
        res.write('data: {"choices":[{"delta":{"content":"Hel"}}]}\n\n')
        setTimeout(() => res.socket?.destroy(), 20)
      }),
    ]
    ctx.router = await startRouter([ctx.stubs[0]!.url])
    const res = await fetch(`${ctx.router.url}/v1/chat/completions`, { method: 'POST', body: chat('x', { stream: true }) })
    expect(res.status).toBe(200)
    const text = await res.text()
    expect(text).toContain('data: {"choices":[{"delta":{"content":"Hel"}}]}')
    const last = text.trim().split('\n\n').at(-1)!
    expect(JSON.parse(last.slice('data: '.length))).toMatchObject({ error: { type: 'upstream_error', code: 'upstream_stream_error' } })
    expect(text).not.toContain('[DONE]')
  })

  it('a non-streaming answer cut short resets the client instead of passing a truncated body as whole', async () => {
    ctx.stubs = [
      await startStub('cut', (req, res) => {
        if (req.url !== '/v1/chat/completions') {
          res.writeHead(200)
          return res.end()
        }
        res.writeHead(200, { 'content-type': 'application/json', 'content-length': '1000' })
        res.write('{"partial":')
        setTimeout(() => res.socket?.destroy(), 20)
      }),
    ]
    ctx.router = await startRouter([ctx.stubs[0]!.url])
    const res = await fetch(`${ctx.router.url}/v1/chat/completions`, { method: 'POST', body: chat('x') })
    await expect(res.text()).rejects.toThrow()
  })

  it('an upstream that does not answer in time → 504', async () => {
    const r = await fleet(1, { upstream: { headersTimeoutMs: 200 } })
    ctx.stubs[0]!.hold = true
    const res = await post(`${r.url}/v1/chat/completions`, chat('x'))
    expect(res.status).toBe(504)
    expect(errorOf(res.text).code).toBe('upstream_timeout')
  })

  it('a client that goes away aborts the upstream request and releases the lease at once', async () => {
    const r = await fleet(1)
    ctx.stubs[0]!.hold = true
    let upstreamClosed = false
    ctx.stubs[0]!.server.on('request', (req) => req.on('close', () => (upstreamClosed = true)))
    const ac = new AbortController()
    const pending = fetch(`${r.url}/v1/chat/completions`, { method: 'POST', body: chat('x'), signal: ac.signal }).catch(() => 'aborted')
    await until(() => ctx.stubs[0]!.held.length === 1, 3000, 'held')
    expect(totalInFlight(r)).toBe(1)
    ac.abort()
    expect(await pending).toBe('aborted')
    await until(() => totalInFlight(r) === 0, 2000, 'lease released')
    await until(() => upstreamClosed || ctx.stubs[0]!.held[0]!.destroyed, 2000, 'upstream aborted')
    ctx.stubs[0]!.held = []
  })

  it('an upstream 5xx is passed through as is', async () => {
    ctx.stubs = [
      await startStub('err', (req, res) => {
        res.writeHead(req.url === '/health' ? 200 : 503, { 'content-type': 'application/json' })
        res.end('{"error":{"message":"overloaded","type":"server_error","code":503}}')
      }),
    ]
    ctx.router = await startRouter([ctx.stubs[0]!.url])
    const res = await post(`${ctx.router.url}/v1/chat/completions`, chat('x'))
    expect(res.status).toBe(503)
    expect(errorOf(res.text).message).toBe('overloaded')
  })
})
