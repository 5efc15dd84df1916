// Clients that open connections and then do nothing, or stop half way, are closed by the
// router; idle connections and sessions are closed, busy ones are not; past maxConnections a
// new connection is closed at once and the admin port still answers. Timeouts here are small
// and every wait is for an event, never a wall-clock bound.
import http2 from 'node:http2'
import { describe, expect, it } from 'vitest'
import { GOAWAY, PREFACE, chatBody, h1Post, h2FrameTypes, h2Post, raw, useSimRouter } from './front-helpers.js'

// Headers get a little longer than idle time: a loaded machine may take a while between connecting and writing.
const FAST = { limits: { headersTimeoutMs: 1000, keepAliveTimeoutMs: 300 } }
const ctx = useSimRouter()

describe('connections that never finish their headers', () => {
  it('silent sockets are closed, unanswered', async () => {
    const router = await ctx.start(FAST)
    const sockets = await Promise.all(Array.from({ length: 200 }, () => raw(router.url)))
    await Promise.all(sockets.map((s) => s.closed))
    for (const s of sockets) expect(s.received).toBe('')
  })

  it('a partial h2c preface is closed', async () => {
    const router = await ctx.start(FAST)
    const s = await raw(router.url)
    s.socket.write(PREFACE.slice(0, 10))
    await s.closed
    expect(s.received).toBe('')
  })

  it('a complete preface and then nothing gets GOAWAY and is closed', async () => {
    const router = await ctx.start(FAST)
    const s = await raw(router.url)
    s.socket.write(PREFACE)
    await s.closed
    expect(h2FrameTypes(s.received)).toContain(GOAWAY)
  })

  it('an HTTP/2 session without a request gets GOAWAY and is closed', async () => {
    const router = await ctx.start(FAST)
    const session = http2.connect(router.url)
    session.on('error', () => {})
    const goaway = new Promise<number>((r) => session.once('goaway', (code: number) => r(code)))
    await new Promise((r) => session.once('close', r))
    expect(await goaway).toBe(http2.constants.NGHTTP2_NO_ERROR)
  })

  it('a partial HTTP/1.1 request line gets 408 and is closed', async () => {
    const router = await ctx.start(FAST)
    const s = await raw(router.url)
    s.socket.write('POST /v1/chat/comp')
    await s.closed
    expect(s.received).toMatch(/^HTTP\/1\.1 408 /)
  })
})

describe('idle connections', () => {
  it('an HTTP/1.1 connection idle after its answer is closed', async () => {
    const router = await ctx.start(FAST)
    const s = await raw(router.url)
    s.socket.write(h1Post(chatBody('idle after this')))
    await s.waitFor('"choices"')
    await s.closed
    expect(s.received).toMatch(/^HTTP\/1\.1 200 /)
    expect(s.received).toMatch(/keep-alive/i)
  })

  it('an HTTP/2 session idle after its answer gets GOAWAY and is closed', async () => {
    const router = await ctx.start(FAST)
    const session = http2.connect(router.url)
    const goaway = new Promise<number>((r) => session.once('goaway', (code: number) => r(code)))
    const closed = new Promise((r) => session.once('close', r))
    const { status } = await h2Post(session, chatBody('then idle'))
    expect(status).toBe(200)
    expect(await goaway).toBe(http2.constants.NGHTTP2_NO_ERROR)
    await closed
  })

  it('an HTTP/2 session is not idle while a stream is open, however quiet', async () => {
    // The simulator holds each request 1.5 s before scheduling it: no byte flows for 5x the keep-alive time.
    const router = await ctx.start(FAST, { faults: { delayMs: 1500 } })
    const session = http2.connect(router.url)
    const events: string[] = []
    session.on('goaway', () => events.push('goaway'))
    const closed = new Promise((r) => session.once('close', r))
    const res = await h2Post(session, chatBody('a slow stream', { stream: true, max_tokens: 8 }), () => events.push('stream end'))
    expect(res.status).toBe(200)
    expect(res.body).toContain('data: [DONE]')
    await closed
    expect(events[0]).toBe('stream end')
    expect(events).toContain('goaway')
  })
})

describe('maxConnections', () => {
  it('beyond it a new connection is closed at once, and the admin port still answers', async () => {
    // Long timeouts: the held connections stay, and the refused one cannot be closed by a timeout instead.
    const router = await ctx.start({ limits: { maxConnections: 4, headersTimeoutMs: 120_000, keepAliveTimeoutMs: 120_000 } })
    const held = []
    for (let i = 0; i < 4; i++) {
      const s = await raw(router.url)
      s.socket.write('GET /ping HTTP/1.1\r\nHost: x\r\n\r\n')
      await s.waitFor('\r\n0\r\n\r\n') // the whole (chunked) answer: the router has accepted it
      held.push(s)
    }
    const refused = await raw(router.url)
    await refused.closed
    expect(refused.received).toBe('')
    const metrics = await fetch(`${router.adminUrl}/metrics`)
    expect(metrics.status).toBe(200)
    const text = await metrics.text()
    expect(text).toMatch(/^prefix_router_front_connections_refused_total 1$/m)
    expect(text).toMatch(/^prefix_router_front_connections 4$/m)
    // A place freed is taken again.
    held.pop()!.socket.destroy()
    let answered = false
    while (!answered) {
      const s = await raw(router.url)
      s.socket.write('GET /ping HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n')
      await s.closed
      answered = s.received.startsWith('HTTP/1.1 200')
    }
    for (const s of held) s.socket.destroy()
  })
})
