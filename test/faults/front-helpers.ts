// Shared set-up for the fault tests: the project's simulator behind a router on loopback, raw
// sockets that record what they were sent, and the check every test ends with (nothing left
// in flight, as the admin port reports it).
import type http2 from 'node:http2'
import net from 'node:net'
import tls from 'node:tls'
import { afterEach, expect } from 'vitest'
import type { ProxyServer } from '../../src/proxy/proxy.js'
import { startSimFleet, type SimFleet, type SimFleetOptions } from '../../src/sim/index.js'
import { startRouter, until } from '../proxy/helpers.js'

export const MODEL = 'sim-tiny'

export function useSimRouter() {
  const ctx = {
    fleet: undefined as SimFleet | undefined,
    router: undefined as ProxyServer | undefined,
    async start(overrides: Record<string, unknown> = {}, sim: Partial<SimFleetOptions> = {}): Promise<ProxyServer> {
      ctx.fleet = await startSimFleet({ instances: 2, profile: 'tiny', ...sim })
      ctx.router = await startRouter(ctx.fleet.urls, overrides)
      return ctx.router
    },
  }
  afterEach(async () => {
    if (ctx.router) {
      const url = `${ctx.router.adminUrl}/admin/instances`
      await until(async () => (await adminInFlight(url)) === 0, 30_000, 'in-flight back to 0 on /admin/instances')
      expect(await adminInFlight(url)).toBe(0)
    }
    await ctx.router?.close()
    await ctx.fleet?.close()
    ctx.router = undefined
    ctx.fleet = undefined
  })
  return ctx
}

async function adminInFlight(url: string): Promise<number> {
  const r = (await (await fetch(url)).json()) as { endpoints: { instances: { inFlight: number }[] }[] }
  return r.endpoints.flatMap((e) => e.instances).reduce((n, i) => n + i.inFlight, 0)
}

export interface Raw {
  socket: net.Socket
  /** Everything the router sent, as latin1. */
  readonly received: string
  /** Resolves when the router's side has closed (the socket's 'close'). */
  closed: Promise<void>
  /** Resolves once `text` has been received at or after offset `from`; rejects if the socket closes first. */
  waitFor(text: string, from?: number): Promise<void>
}

/** A plain TCP connection to url's port (TLS with ALPN http/1.1 for https:); resolves once connected. */
export function raw(url: string): Promise<Raw> {
  return new Promise((resolve, reject) => {
    let received = ''
    const waiters: { text: string; from: number; done: () => void }[] = []
    const port = Number(new URL(url).port)
    const secure = url.startsWith('https:')
    const socket = secure ? tls.connect({ port, host: '127.0.0.1', rejectUnauthorized: false, ALPNProtocols: ['http/1.1'] }) : net.connect(port, '127.0.0.1')
    const closed = new Promise<void>((r) => socket.once('close', () => r()))
    socket.on('data', (d: Buffer) => {
      received += d.toString('latin1')
      for (const w of waiters.splice(0)) {
        if (received.includes(w.text, w.from)) w.done()
        else waiters.push(w)
      }
    })
    socket.on('error', () => {}) // a reset is one way of being closed
    socket.once(secure ? 'secureConnect' : 'connect', () => {
      socket.off('error', reject)
      resolve({
        socket,
        get received() {
          return received
        },
        closed,
        waitFor: (text, from = 0) =>
          new Promise<void>((done, fail) => {
            if (received.includes(text, from)) return done()
            waiters.push({ text, from, done })
            void closed.then(() => fail(new Error(`closed before ${JSON.stringify(text)}; got ${JSON.stringify(received.slice(0, 200))}`)))
          }),
      })
    })
    socket.once('error', reject)
  })
}

/** HTTP/2 frame types in a byte stream read from the start of the server's side (RFC 9113 section 4.1). */
export function h2FrameTypes(bytes: string): number[] {
  const b = Buffer.from(bytes, 'latin1')
  const types: number[] = []
  for (let at = 0; at + 9 <= b.length; at += 9 + b.readUIntBE(at, 3)) types.push(b[at + 3]!)
  return types
}

export const GOAWAY = 7
export const PREFACE = 'PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n'

export const chatBody = (content: string, extra: Record<string, unknown> = {}) =>
  JSON.stringify({ model: MODEL, messages: [{ role: 'user', content }], max_tokens: 4, ...extra })

export const h1Post = (body: string) =>
  `POST /v1/chat/completions HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\nContent-Length: ${Buffer.byteLength(body)}\r\n\r\n${body}`

/** One chat request on a session; onResponse runs when its headers arrive, onEnd when it ends. */
export function h2Post(session: http2.ClientHttp2Session, body: string, onEnd?: () => void, onResponse?: () => void): Promise<{ status: number; body: string }> {
  return new Promise((resolve, reject) => {
    const s = session.request({ ':method': 'POST', ':path': '/v1/chat/completions', 'content-type': 'application/json' })
    let status = 0
    let text = ''
    s.on('response', (h) => {
      status = Number(h[':status'])
      onResponse?.()
    })
    s.setEncoding('utf8')
    s.on('data', (d: string) => (text += d))
    s.on('end', () => {
      onEnd?.()
      resolve({ status, body: text })
    })
    s.on('error', reject)
    s.end(body)
  })
}
