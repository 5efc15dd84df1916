// Bodies built to hurt the parser or the clock, sent to a real router in front of the
// simulator: deep nesting is refused before any parse, container floods are parsed off the
// event loop, slow bodies time out, and the worker routes exactly as the main thread does.
import http from 'node:http'
import http2 from 'node:http2'
import net from 'node:net'
import fc from 'fast-check'
import { afterAll, afterEach, describe, expect, it } from 'vitest'
import { openAIRequest, type OpenAIApi } from '../../src/core/key/openai-key.js'
import { RequestError } from '../../src/core/errors.js'
import { ProxyError } from '../../src/request/errors.js'
import { JsonShape } from '../../src/request/json-shape.js'
import { OFFLOAD_BYTES, offloads } from '../../src/request/openai-body.js'
import { closeParsePool, ParsePool } from '../../src/request/parse-pool.js'
import type { ProxyServer } from '../../src/proxy/proxy.js'
import { startSimFleet, type SimFleet } from '../../src/sim/index.js'
import { chat, startRouter, startStub, totalInFlight, until, type Stub } from '../proxy/helpers.js'
import { openAIBodies as bodies } from '../helpers/openai-bodies.js'

const MODEL = 'sim-tiny'
let fleet: SimFleet | undefined
let stub: Stub | undefined
let router: ProxyServer | undefined

/** Requests in flight as the admin port reports them, summed over every instance. */
async function adminInFlight(r: ProxyServer): Promise<number> {
  const admin = (await (await fetch(`${r.adminUrl}/admin/instances`)).json()) as { endpoints: { instances: { inFlight: number }[] }[] }
  return admin.endpoints.flatMap((e) => e.instances).reduce((n, i) => n + i.inFlight, 0)
}

afterEach(async () => {
  if (router) {
    await until(async () => (await adminInFlight(router!)) === 0, 5000, 'in-flight back to 0')
    expect(totalInFlight(router)).toBe(0)
  }
  await router?.close()
  await fleet?.close()
  await stub?.close()
  router = fleet = stub = undefined
})
afterAll(() => closeParsePool())

async function simRouter(overrides: Record<string, unknown> = {}, instances = 1): Promise<ProxyServer> {
  fleet = await startSimFleet({ instances, profile: 'tiny', host: '127.0.0.1', port: 0 })
  router = await startRouter(fleet.urls, overrides)
  return router
}

/** A valid chat body whose field `x` holds `inner` (raw JSON bytes). */
function chatWith(inner: Buffer): Buffer {
  const head = Buffer.from(`{"model":"${MODEL}","max_tokens":1,"messages":[{"role":"user","content":"hi"}],"x":`)
  return Buffer.concat([head, inner, Buffer.from('}')])
}

/** `bytes` of arrays nested inside one another: [[[[...]]]]. */
function nestedArrays(bytes: number): Buffer {
  const half = Math.floor(bytes / 2)
  const b = Buffer.alloc(half * 2, 0x5d)
  b.fill(0x5b, 0, half)
  return b
}

/** About `bytes` of one-element arrays side by side: [[0],[0],...]. */
function smallArrays(bytes: number): Buffer {
  const n = Math.floor((bytes - 2) / 4)
  const b = Buffer.alloc(n * 4 + 1)
  b[0] = 0x5b
  for (let i = 0; i < n; i++) b.write(i === n - 1 ? '[0]]' : '[0],', 1 + i * 4, 'latin1')
  return b
}

function request(url: string, path: string, body: Buffer, agent?: http.Agent): { sent: Promise<void>; done: Promise<{ status: number; text: string; headers: http.IncomingHttpHeaders }> } {
  let flushed!: () => void
  const sent = new Promise<void>((r) => (flushed = r))
  const done = new Promise<{ status: number; text: string; headers: http.IncomingHttpHeaders }>((resolve, reject) => {
    const req = http.request(`${url}${path}`, { method: 'POST', agent: agent ?? false, headers: { 'content-type': 'application/json', 'content-length': body.length } }, (res) => {
      let text = ''
      res.setEncoding('utf8')
      res.on('data', (d: string) => (text += d))
      res.on('end', () => resolve({ status: res.statusCode ?? 0, text, headers: res.headers }))
    })
    req.on('error', reject)
    req.end(body, () => flushed())
  })
  return { sent, done }
}

function get(url: string, agent: http.Agent): Promise<number> {
  return new Promise((resolve, reject) => {
    http
      .get(url, { agent }, (res) => {
        res.resume()
        res.on('end', () => resolve(res.statusCode ?? 0))
      })
      .on('error', reject)
  })
}

const errorCode = (text: string) => (JSON.parse(text) as { error: { code: string } }).error.code

describe('a body nested 8 million deep', () => {
  it('is refused with 400 json_too_deep before any parse; memory stays flat and the process answers', async () => {
    const r = await simRouter()
    const body = chatWith(nestedArrays(16 * 1024 * 1024 - 200))
    expect((await request(r.url, '/v1/chat/completions', Buffer.from(chat('warm up', { model: MODEL, max_tokens: 1 }))).done).status).toBe(200)
    const baseline = process.memoryUsage().rss
    for (let i = 0; i < 3; i++) {
      const res = await request(r.url, '/v1/chat/completions', body).done
      expect(res.status).toBe(400)
      expect(res.headers.connection).toBe('close')
      const err = (JSON.parse(res.text) as { error: { code: string; message: string; type: string } }).error
      expect(err).toMatchObject({ code: 'json_too_deep', type: 'invalid_request_error' })
      expect(err.message).toContain('256')
    }
    // Parsing it once took the router from about 100 MB to about 680 MB.
    expect(process.memoryUsage().rss).toBeLessThan(baseline * 2)
    expect(await get(`${r.url}/ping`, new http.Agent())).toBe(200)
    // Refused before routing: no instance ever counted them.
    expect(await adminInFlight(r)).toBe(0)
  })
})

describe('8 MB of small arrays in a chat body', () => {
  it('is routed to the simulator, and /ping on another connection is answered while it is parsed', async () => {
    const r = await simRouter()
    const body = chatWith(smallArrays(8 * 1024 * 1024))
    const ep = [...r.endpoints()][0]!
    const routed = () => [...ep.instances.values()].reduce((n, i) => n + i.requests, 0)
    const pings = new http.Agent({ keepAlive: true, maxSockets: 1 })
    expect(await get(`${r.url}/ping`, pings)).toBe(200)
    const before = routed()
    const big = request(r.url, '/v1/chat/completions', body)
    let finished = false
    const result = big.done.finally(() => (finished = true))
    await big.sent
    // Pings sent once the whole body is on the wire, one after another until the big
    // request completes, and how many of them came back before the router had routed it.
    // With the parse on the event loop only those answered while the router was still
    // reading the body do (3 to 13 measured); with it in a worker, thousands.
    let beforeRouting = 0
    let total = 0
    while (!finished) {
      expect(await get(`${r.url}/ping`, pings)).toBe(200)
      total++
      if (routed() === before && !finished) beforeRouting++
    }
    pings.destroy()
    const res = await result
    expect(res.status).toBe(200)
    expect(JSON.parse(res.text)).toMatchObject({ object: 'chat.completion', model: MODEL })
    expect(routed()).toBe(before + 1)
    expect(beforeRouting, `${beforeRouting} of ${total} pings answered before routing`).toBeGreaterThanOrEqual(100)
  }, 180_000) // two parses of 8 MB (router's worker, then the simulator), slow on a busy machine
})

/** Raw HTTP/1.1: sends `head`, then one byte of body every `everyMs` until the server closes. */
function drip(url: string, head: string, everyMs = 50): Promise<{ text: string; closed: boolean }> {
  const { hostname, port } = new URL(url)
  return new Promise((resolve) => {
    const sock = net.connect(Number(port), hostname)
    let text = ''
    const timer = setInterval(() => sock.write('a'), everyMs)
    // A bound on the test, not an assertion: a server that never answers fails below.
    const giveUp = setTimeout(() => sock.destroy(), 20_000)
    sock.on('data', (d) => (text += d.toString('latin1')))
    sock.on('error', () => undefined)
    sock.on('close', () => {
      clearInterval(timer)
      clearTimeout(giveUp)
      resolve({ text, closed: text.length > 0 })
    })
    sock.write(head)
  })
}

const headFor = (path: string, length: number, first: string) =>
  `POST ${path} HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\nContent-Length: ${length}\r\n\r\n${first}`

describe('a body dripped slower than limits.bodyTimeoutMs', () => {
  it('chat: 408 request_timeout, and the connection is closed', async () => {
    const r = await simRouter({ limits: { bodyTimeoutMs: 300 } })
    const { text, closed } = await drip(r.url, headFor('/v1/chat/completions', 100_000, `{"model":"${MODEL}","messages":[{"role":"user","content":"`))
    expect(text).toMatch(/^HTTP\/1\.1 408 /)
    expect(text).toMatch(/\r\nconnection: close\r\n/i)
    expect(text).toMatch(/"code":"request_timeout"/)
    expect(closed).toBe(true)
  })

  it('invoke: the upstream request streaming the rest fails, the client gets 408 and a closed connection', async () => {
    stub = await startStub('s0')
    let upstreamStarted = false
    let upstreamEnded = false
    let upstreamClosed = false
    stub.server.on('request', (req: http.IncomingMessage) => {
      if (req.method !== 'POST') return
      upstreamStarted = true
      req.on('end', () => (upstreamEnded = true))
      req.on('close', () => (upstreamClosed = true))
    })
    router = await startRouter([stub.url], { limits: { bodyTimeoutMs: 400 }, routing: { prefixLength: 1024 } })
    const { text, closed } = await drip(router.url, headFor('/invocations', 100_000, 'p'.repeat(2000)))
    expect(text).toMatch(/^HTTP\/1\.1 408 /)
    expect(text).toMatch(/"code":"request_timeout"/)
    expect(closed).toBe(true)
    // The prefix was routed and its bytes went upstream before the deadline...
    expect(upstreamStarted).toBe(true)
    // ...and that request was cut, not left waiting for the rest.
    await until(() => upstreamClosed, 5000, 'upstream request closed')
    expect(upstreamEnded).toBe(false)
  })

  it('invoke read whole (a small declared length): 408 before routing, nothing sent upstream, a closed connection', async () => {
    stub = await startStub('s0')
    let upstream = 0
    stub.server.on('request', (req: http.IncomingMessage) => void (req.method === 'POST' && upstream++))
    router = await startRouter([stub.url], { limits: { bodyTimeoutMs: 300 } })
    const { text, closed } = await drip(router.url, headFor('/invocations', 1000, '{"inputs":"'))
    expect(text).toMatch(/^HTTP\/1\.1 408 /)
    expect(text).toMatch(/\r\nconnection: close\r\n/i)
    expect(text).toMatch(/"code":"request_timeout"/)
    expect(closed).toBe(true)
    expect(upstream).toBe(0)
  })

  it('HTTP/2: 408 on the stream, which is then reset with NO_ERROR; the session stays usable', async () => {
    const r = await simRouter({ limits: { bodyTimeoutMs: 300 } })
    const session = http2.connect(r.url)
    try {
      const s = session.request({ ':method': 'POST', ':path': '/v1/chat/completions', 'content-type': 'application/json' })
      s.write(`{"model":"${MODEL}","messages":[{"role":"user","content":"`)
      const timer = setInterval(() => s.write('a'), 50)
      let status = 0
      let text = ''
      s.on('response', (h) => {
        status = Number(h[':status'])
        clearInterval(timer)
      })
      s.setEncoding('utf8')
      s.on('data', (d: string) => (text += d))
      s.on('error', () => undefined)
      // The server closing the stream while this side is still open shows here as 'aborted'.
      // ('close' is no signal: a Node client stream with a write pending at the reset never emits it.)
      await Promise.all([new Promise((resolve) => s.once('aborted', resolve)), new Promise((resolve) => s.once('end', resolve))])
      clearInterval(timer)
      expect(status).toBe(408)
      expect(errorCode(text)).toBe('request_timeout')
      expect(s.rstCode).toBe(http2.constants.NGHTTP2_NO_ERROR)
      const ping = session.request({ ':path': '/ping' })
      const pingStatus = await new Promise<number>((resolve) => ping.on('response', (h) => resolve(Number(h[':status']))))
      ping.resume()
      expect(pingStatus).toBe(200)
    } finally {
      session.close()
    }
  })
})

type Settled = { ok: unknown } | { refused: { status: number; code: string; message: string } }

const refusal = (err: unknown) => {
  if (!(err instanceof RequestError)) throw err
  return { refused: { status: err.status, code: err.code, message: err.message } }
}

function onMainThread(api: OpenAIApi, raw: Buffer, span: number): Settled {
  try {
    return { ok: openAIRequest(api, raw, span) }
  } catch (err) {
    return refusal(err)
  }
}

describe('the worker and the main thread', () => {
  it('give identical routing results and identical refusals for any body', async () => {
    const pool = new ParsePool({ size: 1 })
    try {
      await fc.assert(
        fc.asyncProperty(bodies, fc.constantFrom(1, 3, 16, 4096), async ([api, raw], span) => {
          const there = await pool.parse(api, raw, span).then((ok) => ({ ok }), refusal)
          expect(there).toStrictEqual(onMainThread(api, raw, span))
        }),
        { numRuns: 500 },
      )
    } finally {
      await pool.close()
    }
  })

  it('send the same prompts to the same instances through the router', async () => {
    const r = await simRouter({ debugHeaders: true }, 4)
    const pad = 'p'.repeat(OFFLOAD_BYTES)
    for (let i = 0; i < 12; i++) {
      const system = `You are assistant number ${i} of the test. `.repeat(20)
      const small = Buffer.from(chat(system, { model: MODEL, max_tokens: 1 }))
      const large = Buffer.from(chat(system, { model: MODEL, max_tokens: 1, pad }))
      expect(offloads(small.length, 0)).toBe(false)
      expect(offloads(large.length, 0)).toBe(true)
      const a = await request(r.url, '/v1/chat/completions', small).done
      const b = await request(r.url, '/v1/chat/completions', large).done
      expect([a.status, b.status]).toEqual([200, 200])
      expect(b.headers['x-prefix-router-instance']).toBe(a.headers['x-prefix-router-instance'])
    }
  })
})

describe('a worker whose parse needs more than its heap', () => {
  it('fails that request with 413 request_too_complex, and the next parse gets a new worker', async () => {
    const pool = new ParsePool({ size: 1, heapMb: 32 })
    try {
      const flood = chatWith(smallArrays(4 * 1024 * 1024))
      const err = await pool.parse('chat', flood, 4096).then(() => undefined, (e: unknown) => e)
      expect(err).toBeInstanceOf(ProxyError)
      expect(err).toMatchObject({ status: 413, code: 'request_too_complex' })
      expect((err as Error).message).toContain('32 MB')
      const ok = await pool.parse('chat', Buffer.from(chat('after the crash')), 4096)
      expect(ok.text).toContain('after the crash')
    } finally {
      await pool.close()
    }
  }, 120_000) // a heap near its limit collects garbage for a while before it gives up
})

/** Nesting depth and number of arrays and objects of a JSON value. */
function shapeOf(v: unknown): { depth: number; containers: number } {
  if (v === null || typeof v !== 'object') return { depth: 0, containers: 0 }
  const kids = (Array.isArray(v) ? v : Object.values(v as object)).map(shapeOf)
  return { depth: 1 + Math.max(0, ...kids.map((k) => k.depth)), containers: 1 + kids.reduce((n, k) => n + k.containers, 0) }
}

describe('the incremental scanner', () => {
  it('counts depth and containers exactly, however the text is cut into chunks', () => {
    fc.assert(
      fc.property(fc.jsonValue({ maxDepth: 8 }), fc.constantFrom(undefined, 1), fc.array(fc.nat(), { maxLength: 8 }), (v, indent, cuts) => {
        const raw = Buffer.from(JSON.stringify(v, null, indent))
        const at = [...new Set(cuts.map((c) => c % (raw.length + 1)))].sort((a, b) => a - b)
        const feed = (max: number) => {
          const s = new JsonShape(max)
          let from = 0
          for (const to of [...at, raw.length]) {
            s.feed(raw.subarray(from, to))
            from = to
          }
          return s
        }
        const want = shapeOf(v)
        expect(feed(Math.max(1, want.depth)).containers).toBe(want.containers)
        if (want.depth > 1) expect(() => feed(want.depth - 1)).toThrow(/deeper than the limit/)
      }),
      { numRuns: 500 },
    )
  })
})
