// Request ids, the access log and the optional OpenTelemetry spans: what a client, an
// instance, an operator reading the log and a tracing backend each get to see of one request.
import { createHash } from 'node:crypto'
import http from 'node:http'
import http2 from 'node:http2'
import { propagation, trace, type Context, type TextMapPropagator } from '@opentelemetry/api'
import { BasicTracerProvider, InMemorySpanExporter, SimpleSpanProcessor, type ReadableSpan } from '@opentelemetry/sdk-trace-base'
import { afterAll, afterEach, beforeAll, describe, expect, it } from 'vitest'
import { ProxyServer } from '../../src/proxy/proxy.js'
import { capturedLog } from '../faults/log-lines.js'
import { chat, startStub, type Stub, testConfig, totalInFlight, until } from './helpers.js'

const UUID = /^[0-9a-f]{8}-[0-9a-f]{4}-4[0-9a-f]{3}-[89ab][0-9a-f]{3}-[0-9a-f]{12}$/
const TENANT = 'acme-tenant-secret-42'
const sha12 = (s: string) => createHash('sha256').update(s).digest('hex').slice(0, 12)

const ctx = { stubs: [] as Stub[], router: undefined as ProxyServer | undefined }
afterEach(async () => {
  if (ctx.router) {
    await until(() => totalInFlight(ctx.router!) === 0, 3000, 'in-flight back to 0')
    await ctx.router.close()
  }
  await Promise.all(ctx.stubs.map((s) => s.close()))
  ctx.stubs = []
  ctx.router = undefined
})

type Handler = Parameters<typeof startStub>[1]

/** A router with debug headers in front of stubs (default handlers unless given), and its log lines. */
async function fleet(handlers: (Handler | undefined)[], overrides: Record<string, unknown> = {}) {
  ctx.stubs = await Promise.all(handlers.map((h, i) => startStub(`s${i}`, h)))
  const { logger, lines } = capturedLog()
  const config = testConfig([{ name: 'default', instances: ctx.stubs.map((s) => s.url) }], overrides)
  ctx.router = await ProxyServer.start(config, { logger })
  return { router: ctx.router, lines, requestLines: () => lines.filter((l) => l.msg === 'request') }
}

async function h1(url: string, method: string, body: string | undefined, headers: Record<string, string> = {}) {
  const r = await fetch(url, { method, ...(body !== undefined && { body }), headers: { 'content-type': 'application/json', ...headers } })
  return { status: r.status, headers: r.headers, text: await r.text() }
}

/** One request on a fresh HTTP/2 (h2c) session: status, headers and body. */
function h2(base: string, method: string, path: string, body: string | undefined, headers: Record<string, string> = {}) {
  return new Promise<{ status: number; headers: http2.IncomingHttpHeaders; text: string }>((resolve, reject) => {
    const session = http2.connect(base)
    session.on('error', reject)
    const s = session.request({ ':method': method, ':path': path, 'content-type': 'application/json', ...headers })
    let res: http2.IncomingHttpHeaders = {}
    let text = ''
    s.on('response', (h) => (res = h))
    s.setEncoding('utf8')
    s.on('data', (d: string) => (text += d))
    s.on('end', () => {
      session.close()
      resolve({ status: Number(res[':status']), headers: res, text })
    })
    s.on('error', reject)
    s.end(body)
  })
}

/** A handler, shared by the stubs it is given to: the first generation any of them gets fails with 503, every later one succeeds. */
function firstGenerationFails(): Handler {
  let failed = false
  return (req, res) => {
    if (req.url !== '/v1/chat/completions') return void res.writeHead(req.url === '/health' ? 200 : 404).end()
    const fail = !failed
    failed = true
    res.writeHead(fail ? 503 : 200, { 'content-type': 'application/json' })
    res.end(fail ? '{"error":{}}' : '{"ok":true}')
  }
}

const generations = (s: Stub) => s.seen.filter((x) => x.url.startsWith('/v1/chat/completions'))

describe('x-request-id', () => {
  it("the client's id goes upstream and comes back, on HTTP/1.1 and HTTP/2", async () => {
    const { router } = await fleet([undefined])
    const a = await h1(`${router.url}/v1/chat/completions`, 'POST', chat('one'), { 'x-request-id': 'client-id-1' })
    expect(a.status).toBe(200)
    expect(a.headers.get('x-request-id')).toBe('client-id-1')
    const b = await h2(router.url, 'POST', '/v1/chat/completions', chat('two'), { 'x-request-id': 'client-id-2' })
    expect(b.status).toBe(200)
    expect(b.headers['x-request-id']).toBe('client-id-2')
    expect(generations(ctx.stubs[0]!).map((r) => r.headers['x-request-id'])).toEqual(['client-id-1', 'client-id-2'])
  })

  it('without one, the router makes one, sends it upstream and returns it, a new one per request', async () => {
    const { router } = await fleet([undefined])
    const a = await h1(`${router.url}/v1/chat/completions`, 'POST', chat('one'))
    const b = await h2(router.url, 'POST', '/v1/chat/completions', chat('two'))
    const ids = [a.headers.get('x-request-id'), b.headers['x-request-id']]
    expect(ids[0]).toMatch(UUID)
    expect(ids[1]).toMatch(UUID)
    expect(ids[0]).not.toBe(ids[1])
    expect(generations(ctx.stubs[0]!).map((r) => r.headers['x-request-id'])).toEqual(ids)
  })

  it("is on the router's own error answers: 404 and 405 on both protocols, 503 with no instance up", async () => {
    const { router, requestLines } = await fleet([undefined])
    const given = await h1(`${router.url}/nowhere`, 'POST', '{}', { 'x-request-id': 'lost-1' })
    expect(given.status).toBe(404)
    expect(given.headers.get('x-request-id')).toBe('lost-1')
    const made = await h1(`${router.url}/v1/chat/completions`, 'GET', undefined)
    expect(made.status).toBe(405)
    expect(made.headers.get('x-request-id')).toMatch(UUID)
    const given2 = await h2(router.url, 'POST', '/nowhere', '{}', { 'x-request-id': 'lost-2' })
    expect(given2.status).toBe(404)
    expect(given2.headers['x-request-id']).toBe('lost-2')
    const made2 = await h2(router.url, 'GET', '/v1/chat/completions', undefined)
    expect(made2.status).toBe(405)
    expect(made2.headers['x-request-id']).toMatch(UUID)
    expect(requestLines().map((l) => [l.status, l.requestId])).toEqual([
      [404, 'lost-1'],
      [405, made.headers.get('x-request-id')],
      [404, 'lost-2'],
      [405, made2.headers['x-request-id']],
    ])

    // The only instance stops: its refused connection takes it out, and nothing is left to answer.
    await ctx.stubs[0]!.close()
    const down = await h1(`${router.url}/v1/chat/completions`, 'POST', chat('three'), { 'x-request-id': 'nobody-home' })
    expect(down.status).toBe(503)
    expect(down.headers.get('x-request-id')).toBe('nobody-home')
    const down2 = await h2(router.url, 'POST', '/v1/chat/completions', chat('four'), { 'x-request-id': 'nobody-home-2' })
    expect(down2.status).toBe(503)
    expect(down2.headers['x-request-id']).toBe('nobody-home-2')
  })

  it('an unusable id is replaced (upstream and back), and the log says so', async () => {
    const { router, requestLines } = await fleet([undefined])
    const bad = ['x'.repeat(201), 'caf\u00e9']
    for (const id of bad) {
      // fetch refuses a non-Latin-1 header value; Node's client sends the bytes as they are.
      const r = await new Promise<http.IncomingMessage>((resolve, reject) => {
        const req = http.request(`${router.url}/v1/chat/completions`, { method: 'POST', headers: { 'content-type': 'application/json', 'x-request-id': id } }, resolve)
        req.on('error', reject)
        req.end(chat('bad id'))
      })
      r.resume()
      expect(r.statusCode).toBe(200)
      expect(r.headers['x-request-id']).toMatch(UUID)
    }
    const ok = await h1(`${router.url}/v1/chat/completions`, 'POST', chat('good id'), { 'x-request-id': 'x'.repeat(200) })
    expect(ok.headers.get('x-request-id')).toBe('x'.repeat(200))
    const upstream = generations(ctx.stubs[0]!).map((r) => r.headers['x-request-id'])
    expect(upstream[0]).toMatch(UUID)
    expect(upstream[1]).toMatch(UUID)
    expect(upstream[2]).toBe('x'.repeat(200))
    expect(requestLines().map((l) => [l.requestId, l.requestIdReplaced])).toEqual([
      [upstream[0], true],
      [upstream[1], true],
      ['x'.repeat(200), undefined],
    ])
  })

  it("an instance that echoes another id does not change the client's, with debug headers or without", async () => {
    for (const debugHeaders of [true, false]) {
      const { router } = await fleet(
        [
          (req, res) => {
            if (req.url !== '/v1/chat/completions') return void res.writeHead(req.url === '/health' ? 200 : 404).end()
            res.writeHead(200, { 'content-type': 'application/json', 'x-request-id': 'cmpl-rewritten' })
            res.end('{}')
          },
        ],
        { debugHeaders },
      )
      const r = await h1(`${router.url}/v1/chat/completions`, 'POST', chat('echo'), { 'x-request-id': 'mine' })
      expect(r.status).toBe(200)
      expect(r.headers.get('x-request-id')).toBe('mine')
      expect(r.headers.has('x-prefix-router-instance')).toBe(debugHeaders)
      await router.close()
      await ctx.stubs[0]!.close()
    }
  })
})

describe('the access log', () => {
  it('one line per request with every field: id, method, path without the query, status, endpoint, model, hashed tenant, strategy, instance, decision, retries, times, bytes', async () => {
    const { router, lines, requestLines } = await fleet([undefined], { routing: { strategy: 'prefix_aware' } })
    const body = chat('fields', { model: 'm-7' })
    const r = await h1(`${router.url}/v1/chat/completions?api-key=hunter2`, 'POST', body, { 'x-request-id': 'line-1', 'x-amzn-sagemaker-prefix-aware-id': TENANT })
    expect(r.status).toBe(200)
    const logged = requestLines()
    expect(logged).toHaveLength(1)
    const l = logged[0]!
    expect(l).toMatchObject({
      level: 30,
      requestId: 'line-1',
      method: 'POST',
      path: '/v1/chat/completions',
      status: 200,
      endpoint: 'default',
      model: 'm-7',
      tenant: sha12(TENANT),
      strategy: 'prefix_aware',
      instance: r.headers.get('x-prefix-router-instance'),
      decision: 'target',
      retries: 0,
      bytesIn: Buffer.byteLength(body),
    })
    expect(l.instance).toBe(ctx.stubs[0]!.url)
    expect(typeof l.ttfbMs).toBe('number')
    expect(typeof l.ms).toBe('number')
    expect(l.ttfbMs as number).toBeGreaterThanOrEqual(0)
    expect(l.ttfbMs as number).toBeLessThanOrEqual(l.ms as number)
    expect(l).not.toHaveProperty('requestIdReplaced')
    expect(l).not.toHaveProperty('outcome')
    // Neither the raw tenant id nor the query string's value is anywhere in the log.
    const text = lines.map((x) => JSON.stringify(x)).join('\n')
    expect(text).not.toContain(TENANT)
    expect(text).not.toContain('hunter2')
  })

  it('a retried request: the instance that answered, its decision, and how many tries came before', async () => {
    // The first generation either instance gets fails with 503; every later one succeeds.
    const flaky = firstGenerationFails()
    const { router, requestLines } = await fleet([flaky, flaky], { routing: { strategy: 'random' } })
    const r = await h1(`${router.url}/v1/chat/completions`, 'POST', chat('retry'), { 'x-request-id': 'twice' })
    expect(r.status).toBe(200)
    const tries = ctx.stubs.flatMap(generations)
    expect(tries.map((t) => t.headers['x-request-id'])).toEqual(['twice', 'twice'])
    const answered = ctx.stubs.find((s) => s.url === r.headers.get('x-prefix-router-instance'))
    expect(answered).toBeDefined()
    // Each instance got one try: the other one answered the 503.
    expect(ctx.stubs.map((s) => generations(s).length)).toEqual([1, 1])
    expect(requestLines()).toEqual([expect.objectContaining({ requestId: 'twice', status: 200, strategy: 'random', decision: 'random', instance: answered!.url, retries: 1 })])
  })

  it("the router's own answers are logged with what is known of them", async () => {
    const { router, requestLines } = await fleet([undefined])
    await h1(`${router.url}/nowhere?token=abc`, 'POST', '{}', { 'x-request-id': 'nf' })
    await h1(`${router.url}/ping`, 'GET', undefined, { 'x-request-id': 'pong' })
    const [nf, ping] = requestLines()
    expect(nf).toMatchObject({ requestId: 'nf', method: 'POST', path: '/nowhere', status: 404 })
    expect(ping).toMatchObject({ requestId: 'pong', method: 'GET', path: '/ping', status: 200 })
    for (const l of [nf!, ping!]) {
      for (const k of ['endpoint', 'model', 'tenant', 'strategy', 'instance', 'decision', 'retries', 'ttfbMs']) expect(l).not.toHaveProperty(k)
      expect(typeof l.ms).toBe('number')
    }
  })

  it('log.accessLog: false leaves the line out; other info lines stay', async () => {
    const { router, lines, requestLines } = await fleet([undefined], { log: { level: 'info', accessLog: false, prompts: true } })
    const r = await h1(`${router.url}/v1/chat/completions`, 'POST', chat('quiet'))
    expect(r.status).toBe(200)
    expect(r.headers.get('x-request-id')).toMatch(UUID)
    expect(requestLines()).toEqual([])
    // The level is untouched: log.prompts' info line is still written.
    expect(lines.some((l) => l.msg === 'routing text')).toBe(true)
  })
})

/** W3C traceparent, enough of it for the test (the real one is in @opentelemetry/core). */
const traceparent: TextMapPropagator = {
  inject(ctx: Context, carrier: unknown) {
    const sc = trace.getSpanContext(ctx)
    if (sc) (carrier as Record<string, string>).traceparent = `00-${sc.traceId}-${sc.spanId}-0${sc.traceFlags}`
  },
  extract(ctx: Context, carrier: unknown) {
    const m = /^00-([0-9a-f]{32})-([0-9a-f]{16})-0([01])$/.exec(String((carrier as Record<string, unknown>).traceparent ?? ''))
    return m ? trace.setSpanContext(ctx, { traceId: m[1]!, spanId: m[2]!, traceFlags: Number(m[3]), isRemote: true }) : ctx
  },
  fields: () => ['traceparent'],
}

const CLIENT_TRACE = '0af7651916cd43dd8448eb211c80319c'
const CLIENT_SPAN = 'b7ad6b7169203331'

describe('OpenTelemetry', () => {
  it('with no SDK registered nothing breaks: the answer is right and the traceparent passes through unchanged', async () => {
    const { router } = await fleet([undefined])
    const tp = `00-${CLIENT_TRACE}-${CLIENT_SPAN}-01`
    const r = await h1(`${router.url}/v1/chat/completions`, 'POST', chat('untraced'), { traceparent: tp })
    expect(r.status).toBe(200)
    expect(trace.getTracer('t').startSpan('s').isRecording()).toBe(false)
    expect(generations(ctx.stubs[0]!)[0]!.headers.traceparent).toBe(tp)
  })

  describe('with an SDK registered', () => {
    const exporter = new InMemorySpanExporter()
    const provider = new BasicTracerProvider({ spanProcessors: [new SimpleSpanProcessor(exporter)] })
    beforeAll(() => {
      expect(trace.setGlobalTracerProvider(provider)).toBe(true)
      expect(propagation.setGlobalPropagator(traceparent)).toBe(true)
    })
    afterAll(async () => {
      trace.disable()
      propagation.disable()
      await provider.shutdown()
    })
    afterEach(() => exporter.reset())

    const named = (name: string) => exporter.getFinishedSpans().filter((s) => s.name === name)
    const parentOf = (s: ReadableSpan) => s.parentSpanContext?.spanId

    it("a request is a span holding a pick and a forward span per try, under the client's trace, with the attributes", async () => {
      const flaky = firstGenerationFails()
      const { router } = await fleet([flaky, flaky], { routing: { strategy: 'random' } })
      const r = await h1(`${router.url}/v1/chat/completions`, 'POST', chat('traced', { model: 'm-9' }), { 'x-request-id': 'traced-1', traceparent: `00-${CLIENT_TRACE}-${CLIENT_SPAN}-01` })
      expect(r.status).toBe(200)
      const [proxy] = named('prefix_router.proxy')
      const picks = named('prefix_router.pick')
      const forwards = named('prefix_router.forward')
      expect(proxy).toBeDefined()
      expect(picks).toHaveLength(2)
      expect(forwards).toHaveLength(2)
      // The client's trace continues through the router.
      expect(proxy!.spanContext().traceId).toBe(CLIENT_TRACE)
      expect(parentOf(proxy!)).toBe(CLIENT_SPAN)
      for (const s of [...picks, ...forwards]) {
        expect(s.spanContext().traceId).toBe(CLIENT_TRACE)
        expect(parentOf(s)).toBe(proxy!.spanContext().spanId)
        expect(s.attributes['prefix_router.request_id']).toBe('traced-1')
      }
      const answered = r.headers.get('x-prefix-router-instance')
      expect(proxy!.attributes).toMatchObject({
        'prefix_router.request_id': 'traced-1',
        'prefix_router.endpoint': 'default',
        'prefix_router.strategy': 'random',
        'gen_ai.request.model': 'm-9',
        'prefix_router.instance': answered,
        'prefix_router.decision': 'random',
        'prefix_router.retries': 1,
        'http.response.status_code': 200,
      })
      expect(proxy!.status.code).toBe(0) // unset: it succeeded
      expect(picks.map((s) => s.attributes['prefix_router.retries'])).toEqual([0, 1])
      expect(picks[1]!.attributes).toMatchObject({ 'prefix_router.instance': answered, 'prefix_router.decision': 'random' })
      expect(forwards.map((s) => [s.attributes['prefix_router.retries'], s.attributes['http.response.status_code'], s.status.code])).toEqual([
        [0, 503, 2], // ERROR
        [1, 200, 0],
      ])
      expect(forwards[1]!.attributes['prefix_router.instance']).toBe(answered)
      // Each try's request carries its own forward span as the parent the instance continues from.
      const tries = ctx.stubs.flatMap(generations).map((t) => t.headers.traceparent)
      expect(new Set(tries)).toEqual(new Set(forwards.map((s) => `00-${CLIENT_TRACE}-${s.spanContext().spanId}-01`)))
    })

    it('failures end the spans failed, the request span with the status the client got', async () => {
      const { router } = await fleet([undefined])
      await ctx.stubs[0]!.close()
      // The instance refuses the connection: the forward span fails, the client gets 503.
      const r = await h1(`${router.url}/v1/chat/completions`, 'POST', chat('down'), { 'x-request-id': 'down-1' })
      expect(r.status).toBe(503)
      expect(named('prefix_router.pick').map((s) => s.status.code)).toEqual([0])
      const [fwd] = named('prefix_router.forward')
      expect(fwd!.status.code).toBe(2)
      expect(fwd!.events.map((e) => e.name)).toEqual(['exception'])
      const [proxy] = named('prefix_router.proxy')
      expect(proxy!.attributes).toMatchObject({ 'prefix_router.request_id': 'down-1', 'http.response.status_code': 503 })
      expect(proxy!.status.code).toBe(2)
      exporter.reset()
      // Now it is known to be down: the pick itself fails, and nothing is forwarded.
      const again = await h1(`${router.url}/v1/chat/completions`, 'POST', chat('down'), { 'x-request-id': 'down-2' })
      expect(again.status).toBe(503)
      expect(named('prefix_router.pick').map((s) => s.status.code)).toEqual([2])
      expect(named('prefix_router.forward')).toEqual([])
      expect(named('prefix_router.proxy').map((s) => [s.attributes['prefix_router.request_id'], s.attributes['http.response.status_code'], s.status.code])).toEqual([['down-2', 503, 2]])
    })
  })
})
