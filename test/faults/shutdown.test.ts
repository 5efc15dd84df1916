// Graceful shutdown of the whole router (ProxyServer.shutdown, and SIGTERM on `serve`): health
// checks fail first, the load balancer gets time to react, requests in flight finish, and what
// cannot finish in time is ended with a reason, not dropped.
import { spawn } from 'node:child_process'
import http from 'node:http'
import http2 from 'node:http2'
import { fileURLToPath } from 'node:url'
import { describe, expect, it } from 'vitest'
import { parseConfig } from '../../src/config/config.js'
import { ProxyServer } from '../../src/proxy/proxy.js'
import { capturedLog } from './log-lines.js'
import { chat, startStub, totalInFlight, until, type Stub } from '../proxy/helpers.js'

const cli = fileURLToPath(new URL('../../dist/cli.js', import.meta.url))

/** An upstream that starts an event stream for every generation and finishes it when told. */
async function streamingStub(): Promise<{ stub: Stub; open: http.ServerResponse[]; finish(): void }> {
  const open: http.ServerResponse[] = []
  const stub = await startStub('sse', (req, res) => {
    if (req.url === '/health') return void res.writeHead(200).end()
    if (req.url === '/v1/models') return void res.writeHead(404).end()
    res.writeHead(200, { 'content-type': 'text/event-stream' })
    res.write('data: {"choices":[{"delta":{"content":"hi"}}]}\n\n')
    open.push(res)
  })
  return {
    stub,
    open,
    finish() {
      for (const res of open.splice(0)) res.end('data: [DONE]\n\n')
    },
  }
}

async function router(urls: string[]) {
  const { logger, lines } = capturedLog()
  const config = parseConfig({
    listen: { host: '127.0.0.1', port: 0 },
    admin: { host: '127.0.0.1', port: 0 },
    health: { intervalMs: 0 },
    discovery: { modelsIntervalMs: 0, metricsIntervalMs: 0 },
    endpoints: [{ name: 'default', instances: urls }],
  })
  const p = await ProxyServer.start(config, { logger })
  return { p, lines }
}

/** Opens a streaming request; `started` once its first event arrived, `done` with the whole body. */
function openStream(url: string, i: number): { started: Promise<void>; done: Promise<string> } {
  let started!: () => void
  const s = new Promise<void>((r) => (started = r))
  const done = new Promise<string>((resolve, reject) => {
    const req = http.request(`${url}/v1/chat/completions`, { method: 'POST', headers: { 'content-type': 'application/json' } }, (res) => {
      let body = ''
      res.on('data', (d: Buffer) => {
        body += d.toString()
        started()
      })
      res.on('end', () => resolve(body))
      res.on('error', () => resolve(`${body}<reset>`))
    })
    req.on('error', reject)
    req.end(chat(`stream ${i}`, { stream: true }))
  })
  return { started: s, done }
}

describe('shutdown', () => {
  it('health checks answer 503 at once; new connections are still served, told to close; streams in flight finish', async () => {
    const up = await streamingStub()
    const { p, lines } = await router([up.stub.url])
    const streams = Array.from({ length: 20 }, (_, i) => openStream(p.url, i))
    await Promise.all(streams.map((s) => s.started))
    // Both waits far away: what happens here is decided by events, not by the clock.
    const stopped = p.shutdown({ delayMs: 60_000, timeoutMs: 60_000 })
    try {
      for (const path of ['/health', '/ping']) {
        const r = await fetch(`${p.url}${path}`)
        expect(r.status).toBe(503)
        expect(await r.json()).toEqual({ status: 'draining' })
      }
      // A new HTTP/1.1 connection during the delay is served, and closed after its answer.
      const h1 = await new Promise<{ status: number; connection: string | undefined }>((resolve, reject) => {
        http
          .get(`${p.url}/v1/models`, { agent: new http.Agent({ keepAlive: true }) }, (res) => {
            res.resume()
            resolve({ status: res.statusCode!, connection: res.headers.connection })
          })
          .on('error', reject)
      })
      expect(h1).toEqual({ status: 200, connection: 'close' })
      // An HTTP/2 session opened during the delay gets GOAWAY; its first stream is answered.
      const session = http2.connect(p.url)
      const goaway = new Promise<void>((r) => session.once('goaway', () => r()))
      const h2status = await new Promise<number>((resolve, reject) => {
        const s = session.request({ ':path': '/v1/models' })
        s.on('response', (h) => resolve(Number(h[':status'])))
        s.on('error', reject)
        s.resume()
      })
      expect(h2status).toBe(200)
      await goaway
      session.close()
    } finally {
      up.finish()
    }
    const bodies = await Promise.all(streams.map((s) => s.done))
    expect(bodies.every((b) => b.endsWith('data: [DONE]\n\n'))).toBe(true)
    // The delay is still running (the balancer's time to react): closing ends it early.
    await p.close()
    await stopped
    expect(lines.filter((l) => l.msg === 'request' && l.status === 499)).toEqual([])
    expect(lines.some((l) => l.msg === 'draining: /health answers 503')).toBe(true)
    await up.stub.close()
  })

  it('streams still open at the drain timeout end with an SSE error event, logged as shutdown, not 499', async () => {
    const up = await streamingStub()
    const { p, lines } = await router([up.stub.url])
    const streams = Array.from({ length: 20 }, (_, i) => openStream(p.url, i))
    await Promise.all(streams.map((s) => s.started))
    // Nothing finishes these streams: the timeout is certain to pass, however slow the machine.
    await p.shutdown({ delayMs: 0, timeoutMs: 200 })
    const bodies = await Promise.all(streams.map((s) => s.done))
    for (const b of bodies) {
      const last = b.trim().split('\n\n').pop()!
      expect(JSON.parse(last.slice('data: '.length))).toEqual({ error: { message: 'the router is shutting down; retry the request', type: 'server_error', code: 'shutdown' } })
    }
    const logged = lines.filter((l) => l.msg === 'request')
    expect(logged).toHaveLength(20)
    expect(logged.every((l) => l.outcome === 'shutdown' && l.status === 200)).toBe(true)
    expect(totalInFlight(p)).toBe(0)
    // The upstream requests were aborted, not left running on the instance.
    await until(() => up.open.every((r) => r.destroyed || r.writableEnded), 5000, 'upstream streams closed')
    await up.stub.close()
  })

  it('serve: SIGTERM drains; a second signal exits at once', async () => {
    const up = await streamingStub()
    const child = spawn(process.execPath, [cli, 'serve', '--upstream', up.stub.url, '--port', '0', '--admin-port', '0', '--host', '127.0.0.1', '--log-level', 'warn', '--drain-delay-ms', '60000'])
    let err = ''
    const url = await new Promise<string>((resolve, reject) => {
      child.stderr.on('data', (d: Buffer) => {
        err += d.toString()
        const m = /on (http:\/\/[\d.:]+) \(admin/.exec(err)
        if (m) resolve(m[1]!)
      })
      child.once('exit', (c) => reject(new Error(`serve exited ${c}: ${err}`)))
    })
    const s = openStream(url, 0)
    await s.started
    child.kill('SIGTERM')
    await until(() => err.includes('SIGTERM: draining'), 10_000, 'the drain message')
    expect((await fetch(`${url}/health`)).status).toBe(503)
    const exit = new Promise<number | null>((r) => child.once('exit', (c) => r(c)))
    child.kill('SIGTERM')
    expect(await exit).toBe(143)
    expect(err).toMatch(/SIGTERM again; exiting without waiting/)
    await s.done
    await up.stub.close()
  })
})
