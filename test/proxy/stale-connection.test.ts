// An upstream that closes keep-alive connections it considers idle, without saying when (no
// Keep-Alive hint): a request written to such a connection as it closes never reaches the
// instance, and must be sent again on a fresh connection rather than answered with a 502. A
// request the instance did take must never be sent twice.
import { channel } from 'node:diagnostics_channel'
import net from 'node:net'
import { afterEach, describe, expect, it } from 'vitest'
import type { ProxyServer } from '../../src/proxy/proxy.js'
import { chat, closeRouter, post, startRouter, until } from './helpers.js'

interface RawUpstream {
  url: string
  /** Request ids of the generation requests the instance parsed (took), in order. */
  taken: string[]
  /** TCP connections accepted. */
  connections: number
  /** Connections closed by `onSecond: 'closeAsWritten'`. */
  closedAsWritten: number
  close(): Promise<void>
}

/**
 * What the instance does with a connection after answering a generation request on it:
 * - default: treats it as idle: reads no more from it and, `closeMs` later, closes it with a
 *   reset (as a kernel does for a socket closed with bytes unread). Anything written to it in
 *   between never reaches the application.
 * - `onSecond: 'close'`: takes the second request of a connection (parses it) and closes
 *   without answering: a request the instance accepted.
 * - `onSecond: 'closeAsWritten'`: closes it cleanly (a FIN, nothing unread) at the instant the
 *   router writes the next generation request to it: an idle close that meets a request on the
 *   wire, made exact. The instant is undici's `undici:client:sendHeaders` event, published just
 *   before the request's bytes are written to the socket it names.
 */
async function rawUpstream(opts: { closeMs: number; onSecond?: 'close' | 'closeAsWritten'; keepAliveHint?: string }): Promise<RawUpstream> {
  const up: RawUpstream = { url: '', taken: [], connections: 0, closedAsWritten: 0, close: async () => undefined }
  const sockets = new Set<net.Socket>()
  // The instance's side of each connection and the generation answers given on it, by the router's port.
  const byPeerPort = new Map<number, { socket: net.Socket; answered: number }>()
  const server = net.createServer((s) => {
    up.connections++
    sockets.add(s)
    const conn = { socket: s, answered: 0 }
    byPeerPort.set(s.remotePort!, conn)
    s.on('close', () => sockets.delete(s))
    s.on('error', () => undefined)
    let buf = Buffer.alloc(0)
    let served = 0
    s.on('data', (d: Buffer) => {
      buf = Buffer.concat([buf, d])
      for (;;) {
        const end = buf.indexOf('\r\n\r\n')
        if (end < 0) return
        const head = buf.subarray(0, end).toString('latin1')
        const length = Number(/\r\ncontent-length: *(\d+)/i.exec(head)?.[1] ?? 0)
        if (buf.length < end + 4 + length) return
        buf = buf.subarray(end + 4 + length)
        const path = head.split(' ')[1]
        const id = /\r\nx-request-id: *([^\r]*)/i.exec(head)?.[1] ?? ''
        const generation = path === '/v1/chat/completions'
        if (generation) {
          up.taken.push(id)
          served++
        }
        if (generation && served === 2 && opts.onSecond === 'close') {
          s.destroy()
          return
        }
        const body = JSON.stringify({ id })
        const hint = opts.keepAliveHint ? `keep-alive: ${opts.keepAliveHint}\r\n` : ''
        s.write(`HTTP/1.1 ${path === '/v1/models' ? '404 Not Found' : '200 OK'}\r\ncontent-type: application/json\r\n${hint}content-length: ${body.length}\r\n\r\n${body}`)
        if (generation) conn.answered++
        if (generation && opts.onSecond === undefined) {
          s.pause()
          setTimeout(() => s.resetAndDestroy(), opts.closeMs)
          return
        }
      }
    })
  })
  await new Promise<void>((r) => server.listen(0, '127.0.0.1', r))
  const port = (server.address() as net.AddressInfo).port
  up.url = `http://127.0.0.1:${port}`
  const sendHeaders = channel('undici:client:sendHeaders')
  const onSendHeaders = (message: unknown) => {
    const { request, socket } = message as { request: { path: string }; socket: net.Socket }
    if (socket.remotePort !== port || request.path !== '/v1/chat/completions') return
    const conn = byPeerPort.get(socket.localPort!)
    if (conn === undefined || conn.answered === 0) return
    // Nothing is unread on the instance's side, so this sends a FIN; the bytes the router is
    // about to write reach a closed socket, which the instance's kernel answers with a reset.
    up.closedAsWritten++
    conn.socket.destroy()
  }
  if (opts.onSecond === 'closeAsWritten') sendHeaders.subscribe(onSendHeaders)
  up.close = () =>
    new Promise<void>((r) => {
      if (opts.onSecond === 'closeAsWritten') sendHeaders.unsubscribe(onSendHeaders)
      for (const s of sockets) s.destroy()
      server.close(() => r())
    })
  return up
}

let router: ProxyServer | undefined
let upstream: RawUpstream | undefined
afterEach(async () => {
  await closeRouter(router, 3000)
  await upstream?.close()
  router = undefined
  upstream = undefined
})

async function retriesMetric(r: ProxyServer): Promise<string[]> {
  const text = await (await fetch(`${r.adminUrl}/metrics`)).text()
  return text.split('\n').filter((l) => l.startsWith('prefix_router_retries_total{'))
}

describe('keep-alive connections the instance closes', () => {
  it('a request written to a connection being closed is sent again on a fresh one: every request succeeds, each reached the instance once', async () => {
    // 20 ms of "idle" after each answer: the next sequential request almost always lands in it.
    upstream = await rawUpstream({ closeMs: 20 })
    // No retries at all: the re-send must not depend on the retry budget or another instance.
    router = await startRouter([upstream.url], { retries: { max: 0, budgetPercent: 0, minRetryConcurrency: 0 } })
    const ids: string[] = []
    for (let i = 0; i < 300; i++) {
      const r = await post(`${router.url}/v1/chat/completions`, chat(`q${i}`))
      expect([r.status, r.text]).toEqual([200, expect.stringContaining('"id"')])
      ids.push(JSON.parse(r.text).id as string)
    }
    // Each request reached the instance exactly once: what it answered is what was asked.
    expect(upstream.taken).toEqual(ids)
    expect(new Set(ids).size).toBe(300)
    // Up to every other request found its connection closing under it (the connection it was
    // answered on is the one the next request is written to): those were sent again, counted.
    const resent = (await retriesMetric(router)).find((l) => l.includes('reason="stale_connection"'))
    expect(resent).toBeDefined()
    expect(Number(resent!.split(' ').pop())).toBeGreaterThan(0)
  })

  it('a request written as the instance closes the connection cleanly (FIN) is sent again, 150 times of 150: the instance never read it', async () => {
    upstream = await rawUpstream({ closeMs: 0, onSecond: 'closeAsWritten' })
    router = await startRouter([upstream.url], { retries: { max: 0, budgetPercent: 0, minRetryConcurrency: 0 } })
    const ids: string[] = []
    for (let i = 0; i < 300; i++) {
      const r = await post(`${router.url}/v1/chat/completions`, chat(`q${i}`))
      expect([r.status, r.text]).toEqual([200, expect.stringContaining('"id"')])
      ids.push(JSON.parse(r.text).id as string)
    }
    // Every connection answers one request and is closed under the next, which goes again on a
    // fresh connection (itself closed after its answer): every other request met a close.
    expect(upstream.closedAsWritten).toBe(150)
    expect(upstream.taken).toEqual(ids)
    const resent = (await retriesMetric(router)).find((l) => l.includes('reason="stale_connection"'))
    expect(resent?.split(' ').pop()).toBe('150')
  })

  it('a request the instance took and then closed on is not sent again (502 upstream_reset)', async () => {
    upstream = await rawUpstream({ closeMs: 0, onSecond: 'close' })
    router = await startRouter([upstream.url], { outlier: { consecutiveGatewayFailure: 0, consecutive5xx: 0 } })
    const statuses: number[] = []
    const codes: string[] = []
    for (let i = 0; i < 20; i++) {
      const r = await post(`${router.url}/v1/chat/completions`, chat(`q${i}`))
      statuses.push(r.status)
      if (r.status !== 200) codes.push(JSON.parse(r.text).error.code as string)
    }
    // Every other request was the second on its connection: taken, then closed on.
    expect(statuses.filter((s) => s !== 200).length).toBeGreaterThan(0)
    expect(new Set(codes)).toEqual(new Set(['upstream_reset']))
    expect(upstream.taken).toHaveLength(20)
    expect(new Set(upstream.taken).size).toBe(20)
  })

  it("honours the instance's Keep-Alive hint: a connection it will close within undici's margin is not used again", async () => {
    // timeout=1: one second, less than the two kept in hand, so every connection is used once.
    upstream = await rawUpstream({ closeMs: 0, keepAliveHint: 'timeout=1' })
    router = await startRouter([upstream.url])
    for (let i = 0; i < 10; i++) expect((await post(`${router.url}/v1/chat/completions`, chat(`q${i}`))).status).toBe(200)
    expect(upstream.taken).toHaveLength(10)
    expect(await retriesMetric(router)).toEqual([])
  })
})

describe('idle connections without a Keep-Alive hint', () => {
  it("are closed by the router before vLLM's (uvicorn's) 5 s idle timeout closes them under a request", async () => {
    // An upstream that never closes: who closes the connection is the router, after upstream.keepAliveTimeoutMs.
    const closed: number[] = []
    const server = net.createServer((s) => {
      s.on('error', () => undefined)
      s.on('end', () => closed.push(Date.now()))
      s.on('data', () => s.write('HTTP/1.1 200 OK\r\ncontent-type: application/json\r\ncontent-length: 2\r\n\r\n{}'))
    })
    await new Promise<void>((r) => server.listen(0, '127.0.0.1', r))
    upstream = { url: `http://127.0.0.1:${(server.address() as net.AddressInfo).port}`, taken: [], connections: 0, closedAsWritten: 0, close: () => new Promise((r) => server.close(() => r())) }
    router = await startRouter([upstream.url])
    expect(router.config.upstream.keepAliveTimeoutMs).toBeLessThan(5000)
    const before = closed.length
    expect((await post(`${router.url}/v1/chat/completions`, chat('q'))).status).toBe(200)
    // The traffic connection goes idle and the router closes it (the old default kept it 60 s).
    await until(() => closed.length > before, 20_000, 'the router to close the idle connection')
  })
})
