// Routing through the real proxy over loopback, with raw stub upstreams that say who they are.
import http from 'node:http'
import http2 from 'node:http2'
import { describe, expect, it } from 'vitest'
import { chat, post, releaseHeld, startRouter, startStub, type Stub, until, useStubFleet } from './helpers.js'

const ctx = useStubFleet()
const fleet = ctx.fleet

const system = 'You are a meticulous assistant for the ACME support desk. '.repeat(110) // ~6,300 characters

describe('prefix-aware routing through the proxy', () => {
  it('requests sharing a 6,000-character system prompt land on one instance (prefixLength 4096)', async () => {
    const r = await fleet(4, { routing: { strategy: 'prefix_aware', prefixLength: 4096 } })
    const where = new Set<string>()
    for (let i = 0; i < 20; i++) {
      const res = await post(`${r.url}/v1/chat/completions`, chat(system, { messages: [{ role: 'system', content: system }, { role: 'user', content: `question ${i}` }] }))
      expect(res.status).toBe(200)
      where.add(res.headers.get('x-prefix-router-instance')!)
      expect(res.headers.get('x-prefix-router-decision')).toBe('target')
    }
    expect(where.size).toBe(1)
  })

  it('with different tenant ids the same prompt spreads out; the same id sticks', async () => {
    const r = await fleet(4)
    const where = new Map<string, string>()
    for (let t = 0; t < 24; t++) {
      const tenant = `tenant-${t}`
      const a = await post(`${r.url}/v1/chat/completions`, chat(system), { 'x-amzn-sagemaker-prefix-aware-id': tenant })
      const b = await post(`${r.url}/v1/chat/completions`, chat(system), { 'x-amzn-sagemaker-prefix-aware-id': tenant })
      expect(b.headers.get('x-prefix-router-instance')).toBe(a.headers.get('x-prefix-router-instance'))
      where.set(tenant, a.headers.get('x-prefix-router-instance')!)
    }
    expect(new Set(where.values()).size).toBeGreaterThanOrEqual(3)
  })

  it('prompt_cache_key in the body separates tenants like the header', async () => {
    const r = await fleet(4)
    const seen = new Set<string>()
    for (let t = 0; t < 24; t++) {
      const res = await post(`${r.url}/v1/chat/completions`, chat(system, { prompt_cache_key: `k${t}` }))
      seen.add(res.headers.get('x-prefix-router-instance')!)
    }
    expect(seen.size).toBeGreaterThanOrEqual(3)
  })

  it('the same chat with other whitespace, key order and sampling parameters lands on the same instance', async () => {
    const r = await fleet(5)
    const messages = [
      { role: 'system', content: 'Be brief.' },
      { role: 'user', content: [{ type: 'text', text: 'Summarise ' }, { type: 'text', text: 'this.' }] },
    ]
    const bodies = [
      JSON.stringify({ model: 'm', messages }),
      JSON.stringify({ messages, model: 'm', temperature: 0.2, top_p: 0.9 }, null, 4),
      `{ "messages" : [ {"content":"Be brief.","role":"system"} , {"content":[{"text":"Summarise ","type":"text"},{"type":"text","text":"this."}],"role":"user"} ] ,\n "stream": false, "model":"m" }`,
    ]
    const where = new Set<string>()
    for (const b of bodies) where.add((await post(`${r.url}/v1/chat/completions`, b)).headers.get('x-prefix-router-instance')!)
    expect(where.size).toBe(1)
    // and a different prompt may go elsewhere: the key does follow the text
    const others = new Set<string>()
    for (let i = 0; i < 30; i++) others.add((await post(`${r.url}/v1/chat/completions`, chat(`other ${i}`))).headers.get('x-prefix-router-instance')!)
    expect(others.size).toBeGreaterThan(1)
  })

  it('completions route by prompt text', async () => {
    const r = await fleet(4)
    const a = await post(`${r.url}/v1/completions`, JSON.stringify({ model: 'm', prompt: `${system} one` , max_tokens: 3}))
    const b = await post(`${r.url}/v1/completions`, JSON.stringify({ prompt: `${system} two`, model: 'm' }))
    expect(a.status).toBe(200)
    expect(b.headers.get('x-prefix-router-instance')).toBe(a.headers.get('x-prefix-router-instance'))
  })

  it('overflows exactly at the threshold: N held open, the N+1st goes elsewhere', async () => {
    const r = await fleet(4, { routing: { concurrencyThreshold: 3 } })
    for (const s of ctx.stubs) s.hold = true
    const body = chat(system)
    const pending = [0, 1, 2].map(() => fetch(`${r.url}/v1/chat/completions`, { method: 'POST', body }))
    await until(() => ctx.stubs.reduce((n, s) => n + s.held.length, 0) === 3, 5000, '3 held requests')
    const target = ctx.stubs.find((s) => s.held.length === 3)
    expect(target).toBeDefined()
    const ep = r.endpoint(undefined)!
    expect(ep.router.inFlight(target!.url)).toBe(3)
    const fourth = fetch(`${r.url}/v1/chat/completions`, { method: 'POST', body })
    await until(() => ctx.stubs.reduce((n, s) => n + s.held.length, 0) === 4, 5000, 'the 4th request')
    const second = ctx.stubs.find((s) => s !== target && s.held.length === 1)
    expect(second).toBeDefined()
    releaseHeld(ctx.stubs)
    const answers = await Promise.all([...pending, fourth])
    expect(answers.map((a) => a.headers.get('x-prefix-router-decision'))).toEqual(['target', 'target', 'target', 'overflow'])
    expect(answers[3]!.headers.get('x-prefix-router-instance')).toBe(second!.url)
    const metrics = await (await fetch(`${r.adminUrl}/metrics`)).text()
    expect(metrics).toMatch(new RegExp(`prefix_router_overflow_total\\{instance="${second!.url}"\\} 1`))
  })

  it('least_outstanding_requests and random spread one prompt over the fleet', async () => {
    for (const strategy of ['least_outstanding_requests', 'random']) {
      const r = await fleet(3, { routing: { strategy } })
      const where = new Set<string>()
      for (let i = 0; i < 40; i++) where.add((await post(`${r.url}/v1/chat/completions`, chat(system))).headers.get('x-prefix-router-instance')!)
      expect(where.size, strategy).toBe(3)
      await r.close()
      await Promise.all(ctx.stubs.map((s) => s.close()))
      ctx.stubs = []
      ctx.router = undefined
    }
  })
})

describe('reload', () => {
  it('removing an instance lets its request in flight finish; new requests go to the others', async () => {
    const r = await fleet(2)
    const [a, b] = ctx.stubs as [Stub, Stub]
    a.hold = true
    b.hold = true
    const pending = fetch(`${r.url}/v1/chat/completions`, { method: 'POST', body: chat('held') })
    await until(() => a.held.length + b.held.length === 1, 3000, 'held request')
    const holder = a.held.length === 1 ? a : b
    const other = holder === a ? b : a
    other.hold = false
    const result = r.reload({ ...r.config, endpoints: [{ name: 'default', instances: [{ url: other.url, weight: 1, models: [], indexBlocks: undefined, role: 'both' }], routing: {} }] })
    expect(result.endpoints).toEqual(['default'])
    for (let i = 0; i < 5; i++) expect((await post(`${r.url}/v1/chat/completions`, chat(`after ${i}`))).headers.get('x-prefix-router-instance')).toBe(other.url)
    releaseHeld([holder])
    const res = await pending
    expect(res.status).toBe(200)
    expect(await res.json()).toEqual({ released: true })
  })
})

describe('the invoke API', () => {
  it('routes on the first prefixLength bytes and forwards the whole body unchanged', async () => {
    const r = await fleet(4, { routing: { prefixLength: 1024 } })
    const head = Buffer.alloc(1024, 7)
    const a = Buffer.concat([head, Buffer.from('tail one')])
    const b = Buffer.concat([head, Buffer.alloc(50_000, 1)])
    const ra = await post(`${r.url}/invocations`, a, { 'content-type': 'application/octet-stream' })
    const rb = await post(`${r.url}/invocations`, b, { 'content-type': 'application/octet-stream' })
    expect(rb.headers.get('x-prefix-router-instance')).toBe(ra.headers.get('x-prefix-router-instance'))
    const got = ctx.stubs.flatMap((s) => s.seen.filter((x) => x.url === '/invocations'))
    expect(got.map((x) => x.body.length).sort((x, y) => x - y)).toEqual([a.length, b.length])
    expect(got.find((x) => x.body.length === b.length)!.body.equals(b)).toBe(true)
  })

  it('routes before the body has ended: the upstream sees the request while the client is still sending', async () => {
    const r = await fleet(2, { routing: { prefixLength: 1024 } })
    let resolveHeaders!: () => void
    const headersSeen = new Promise<void>((res) => (resolveHeaders = res))
    for (const s of ctx.stubs) s.server.prependListener('request', () => resolveHeaders())
    let finish!: () => void
    const gate = new Promise<void>((res) => (finish = res))
    async function* body() {
      yield Buffer.alloc(2048, 3) // more than the prefix
      await gate // hold the rest until the upstream has the request
      yield Buffer.alloc(1024, 4)
    }
    const res = fetch(`${r.url}/invocations`, { method: 'POST', body: body() as never, duplex: 'half' } as RequestInit)
    await headersSeen
    finish()
    const out = await res
    expect(out.status).toBe(200)
    expect(JSON.parse(await out.text())).toMatchObject({ bytes: 3072 })
  })

  it('endpoint-scoped routes map onto the instance paths', async () => {
    ctx.stubs = [await startStub('a')]
    ctx.router = await startRouter([], { endpoints: [{ name: 'alpha', instances: [ctx.stubs[0]!.url] }] })
    await post(`${ctx.router.url}/endpoints/alpha/invocations?x=1`, 'raw')
    await post(`${ctx.router.url}/endpoints/alpha/openai/v1/chat/completions`, chat('x'))
    const probes = ['/health', '/v1/models', '/metrics']
    expect(ctx.stubs[0]!.seen.map((s) => s.url).filter((u) => !probes.includes(u))).toEqual(['/invocations?x=1', '/v1/chat/completions'])
  })
})

describe('forwarding', () => {
  it('strips hop-by-hop headers both ways, rewrites Host and adds X-Forwarded-*', async () => {
    ctx.stubs = [
      await startStub('h', (req, res) => {
        res.writeHead(200, { connection: 'keep-alive, x-hop', 'x-hop': 'secret', 'keep-alive': 'timeout=5', 'x-end': 'kept' })
        res.end('{}')
      }),
    ]
    ctx.router = await startRouter([ctx.stubs[0]!.url])
    // node:http, not fetch: fetch refuses to send Connection and TE itself.
    const res = await new Promise<http.IncomingMessage>((resolve, reject) => {
      const req = http.request(`${ctx.router!.url}/v1/chat/completions`, {
        method: 'POST',
        headers: { connection: 'x-private', 'x-private': '1', 'x-custom': 'yes', te: 'trailers', 'content-type': 'application/json' },
      })
      req.on('response', resolve).on('error', reject)
      req.end(chat('x'))
    })
    res.resume()
    expect(res.headers['x-end']).toBe('kept')
    expect(res.headers['x-hop']).toBeUndefined()
    expect(res.headers['keep-alive']).not.toBe('timeout=5') // ours may say timeout=65; the upstream's is not passed on
    const seen = ctx.stubs[0]!.seen.find((s) => s.url === '/v1/chat/completions')!
    expect(seen.headers['x-custom']).toBe('yes')
    expect(seen.headers['x-private']).toBeUndefined()
    expect(seen.headers.te).toBeUndefined()
    expect(seen.headers.host).toBe(new URL(ctx.stubs[0]!.url).host)
    expect(seen.headers['x-forwarded-for']).toBe('127.0.0.1')
    expect(seen.headers['x-forwarded-host']).toBe(new URL(ctx.router.url).host)
  })

  it('keeps repeated headers both ways and puts its own X-Forwarded-* and X-Request-Id in place of the ones sent, over HTTP/1.1 and h2c', async () => {
    ctx.stubs = [
      await startStub('h', (_req, res) => {
        res.setHeader('set-cookie', ['a=1', 'b=2'])
        res.writeHead(200, { 'x-request-id': 'from-the-instance', 'content-type': 'application/json' })
        res.end('{}')
      }),
    ]
    ctx.router = await startRouter([ctx.stubs[0]!.url])
    const sent = { 'content-type': 'application/json', 'x-forwarded-for': '10.0.0.1', 'x-forwarded-proto': 'https', 'x-request-id': 'client-id', authorization: 'AWS4-HMAC-SHA256 Credential=x', 'x-amz-security-token': 't' }
    const h1 = await new Promise<http.IncomingMessage>((resolve, reject) => {
      const req = http.request(`${ctx.router!.url}/v1/chat/completions`, { method: 'POST', headers: { ...sent, 'set-cookie': ['c=3', 'd=4'] } })
      req.on('response', resolve).on('error', reject)
      req.end(chat('x'))
    })
    h1.resume()
    expect(h1.headers['set-cookie']).toEqual(['a=1', 'b=2'])
    expect(h1.headers['x-request-id']).toBe('client-id')
    const session = http2.connect(ctx.router.url)
    const h2 = await new Promise<http2.IncomingHttpHeaders>((resolve, reject) => {
      const req = session.request({ ':method': 'POST', ':path': '/v1/chat/completions', ...sent })
      req.on('response', resolve).on('error', reject)
      req.resume()
      req.end(chat('y'))
    })
    session.close()
    expect(h2['set-cookie']).toEqual(['a=1', 'b=2'])
    expect(h2['x-request-id']).toBe('client-id')
    expect(h2.connection).toBeUndefined()
    const seen = ctx.stubs[0]!.seen.filter((s) => s.url === '/v1/chat/completions')
    expect(seen).toHaveLength(2)
    for (const s of seen) {
      expect(s.headers['x-forwarded-for']).toBe('10.0.0.1, 127.0.0.1')
      expect(s.headers['x-forwarded-proto']).toBe('http')
      expect(s.headers['x-forwarded-host']).toBe(new URL(ctx.router.url).host)
      expect(s.headers['x-request-id']).toBe('client-id')
      expect(s.headers.authorization).toBeUndefined()
      expect(s.headers['x-amz-security-token']).toBeUndefined()
      expect(s.headers['content-length']).toBe(String(Buffer.byteLength(chat(s === seen[0] ? 'x' : 'y'))))
    }
    expect(seen[0]!.headers['set-cookie']).toEqual(['c=3', 'd=4'])
  })

  it('debug headers are off unless asked for', async () => {
    ctx.stubs = [await startStub('a')]
    ctx.router = await startRouter([ctx.stubs[0]!.url], { debugHeaders: false })
    const res = await post(`${ctx.router.url}/v1/chat/completions`, chat('x'))
    expect(res.status).toBe(200)
    expect(res.headers.get('x-prefix-router-instance')).toBeNull()
  })
})
