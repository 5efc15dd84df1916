// Shared set-up for proxy tests: a router on loopback port 0 in front of given upstreams,
// raw stub upstreams that can hold requests open, and the in-flight check every test ends with.
import http from 'node:http'
import type { AddressInfo } from 'node:net'
import { afterEach, expect } from 'vitest'
import { parseConfig, type Config } from '../../src/config/config.js'
import { ProxyServer } from '../../src/proxy/proxy.js'

/**
 * A test router's configuration: loopback ports, no periodic probes or scrapes, debug
 * headers; `overrides` on top, then the endpoints given.
 */
export function testConfig(endpoints: unknown[], overrides: Record<string, unknown> = {}): Config {
  return parseConfig({
    listen: { host: '127.0.0.1', port: 0 },
    admin: { host: '127.0.0.1', port: 0 },
    health: { intervalMs: 0, timeoutMs: 2000 },
    discovery: { modelsIntervalMs: 0, metricsIntervalMs: 0 },
    // The stubs are no engines; tests of load from the engines turn it on (test/fleet/load).
    engineLoad: { mode: 'off' },
    debugHeaders: true,
    // Tests start many routers; the warm-up has tests of its own (warm.test.ts).
    warmup: { requests: 0, connections: 0 },
    ...overrides,
    endpoints,
  })
}

export async function startRouter(urls: string[], overrides: Record<string, unknown> = {}): Promise<ProxyServer> {
  const endpoints = (overrides.endpoints as unknown[] | undefined) ?? [{ name: 'default', instances: urls }]
  return ProxyServer.start(testConfig(endpoints, { log: { level: 'silent' }, ...overrides }))
}

/** Sum of in-flight counters over every endpoint of the router. */
export function totalInFlight(p: Pick<ProxyServer, 'endpoints'>): number {
  let n = 0
  for (const ep of p.endpoints()) for (const i of ep.router.instances()) n += i.inFlight
  return n
}

/** Waits until cond() holds (polling), failing after timeoutMs. */
export async function until(cond: () => boolean | Promise<boolean>, timeoutMs = 5000, what = 'condition'): Promise<void> {
  const end = Date.now() + timeoutMs
  while (!(await cond())) {
    if (Date.now() > end) throw new Error(`timed out waiting for ${what}`)
    await new Promise((r) => setTimeout(r, 10))
  }
}

/** Waits for a router's in-flight counts to return to 0 (a leaked lease fails the test), then closes it. */
export async function closeRouter(router: ProxyServer | undefined, timeoutMs = 5000): Promise<void> {
  if (!router) return
  await until(() => totalInFlight(router) === 0, timeoutMs, 'in-flight back to 0')
  await router.close()
}

export interface Stub {
  url: string
  /** Requests received so far (method, url, headers, body). */
  seen: { method: string; url: string; headers: http.IncomingHttpHeaders; body: Buffer }[]
  /** Requests being held open (when hold is on). */
  held: http.ServerResponse[]
  hold: boolean
  server: http.Server
  close(): Promise<void>
}

/**
 * A raw HTTP upstream: answers JSON naming itself, or holds responses open while `hold`
 * is set (to build up in-flight counts).
 */
export async function startStub(name: string, handler?: (req: http.IncomingMessage, res: http.ServerResponse, body: Buffer) => void): Promise<Stub> {
  const stub: Stub = { url: '', seen: [], held: [], hold: false, server: undefined as never, close: async () => undefined }
  const server = http.createServer((req, res) => {
    const chunks: Buffer[] = []
    req.on('data', (c: Buffer) => chunks.push(c))
    req.on('end', () => {
      const body = Buffer.concat(chunks)
      stub.seen.push({ method: req.method ?? '', url: req.url ?? '', headers: req.headers, body })
      if (handler) return handler(req, res, body)
      if (req.url === '/health' || req.url === '/v1/models') {
        res.writeHead(req.url === '/health' ? 200 : 404)
        return res.end()
      }
      if (stub.hold) {
        stub.held.push(res)
        return
      }
      res.writeHead(200, { 'content-type': 'application/json', 'x-stub': name })
      res.end(JSON.stringify({ stub: name, bytes: body.length }))
    })
  })
  await new Promise<void>((r) => server.listen(0, '127.0.0.1', r))
  stub.server = server
  stub.url = `http://127.0.0.1:${(server.address() as AddressInfo).port}`
  stub.close = () =>
    new Promise<void>((r) => {
      server.closeAllConnections()
      server.close(() => r())
    })
  return stub
}

/** Releases every held response of the stubs. */
export function releaseHeld(stubs: Stub[]): void {
  for (const s of stubs) {
    for (const res of s.held.splice(0)) {
      res.writeHead(200, { 'content-type': 'application/json' })
      res.end('{"released":true}')
    }
  }
}

export const chat = (content: string, extra: Record<string, unknown> = {}) =>
  JSON.stringify({ model: 'm', messages: [{ role: 'system', content }, { role: 'user', content: 'hi' }], ...extra })

export async function post(url: string, body: string | Buffer, headers: Record<string, string> = {}) {
  const r = await fetch(url, { method: 'POST', body, headers: { 'content-type': 'application/json', ...headers } })
  return { status: r.status, headers: r.headers, text: await r.text() }
}

/**
 * Per-test stub fleet: `ctx.fleet(n)` starts n stubs and a router in front of them; after
 * each test held requests are released, the in-flight counters must be back at 0, and
 * everything is closed.
 */
export function useStubFleet() {
  const ctx = {
    stubs: [] as Stub[],
    router: undefined as ProxyServer | undefined,
    async fleet(n: number, overrides: Record<string, unknown> = {}): Promise<ProxyServer> {
      ctx.stubs = await Promise.all(Array.from({ length: n }, (_, i) => startStub(`s${i}`)))
      ctx.router = await startRouter(
        ctx.stubs.map((s) => s.url),
        overrides,
      )
      return ctx.router
    },
  }
  afterEach(async () => {
    releaseHeld(ctx.stubs)
    if (ctx.router) {
      await until(() => totalInFlight(ctx.router!) === 0, 3000, 'in-flight back to 0')
      expect(totalInFlight(ctx.router)).toBe(0)
    }
    await ctx.router?.close()
    await Promise.all(ctx.stubs.map((s) => s.close()))
    ctx.stubs = []
    ctx.router = undefined
  })
  return ctx
}

/** One request on an HTTP/2 session: status and body. */
export function h2Request(session: import('node:http2').ClientHttp2Session, path: string, body: string): Promise<{ status: number; body: string }> {
  return new Promise((resolve, reject) => {
    const s = session.request({ ':method': 'POST', ':path': path, 'content-type': 'application/json' })
    let status = 0
    let text = ''
    s.on('response', (h) => (status = Number(h[':status'])))
    s.setEncoding('utf8')
    s.on('data', (d: string) => (text += d))
    s.on('end', () => resolve({ status, body: text }))
    s.on('error', reject)
    s.end(body)
  })
}
