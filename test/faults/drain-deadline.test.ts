// The drain ends within its delay and timeout: what is still running near the end is ended
// inside the timeout, not after it, and nothing the router itself started (a health probe an
// instance has not answered) holds the shutdown past it.
import http from 'node:http'
import net from 'node:net'
import { describe, expect, it } from 'vitest'
import { parseConfig } from '../../src/config/config.js'
import { ProxyServer } from '../../src/proxy/proxy.js'
import { capturedLog } from './log-lines.js'
import { startStub, until } from '../proxy/helpers.js'

/** The drain's waits on a clock of the test's: each sleep moves it on, and the test reads how far. */
class CountingClock {
  at = 0
  readonly sleeps: number[] = []
  now = (): number => this.at
  sleep = (ms: number): Promise<void> => {
    this.sleeps.push(ms)
    this.at += ms
    // A turn of the event loop, so that sockets and requests move between the drain's looks.
    return new Promise((r) => setImmediate(r))
  }
}

function config(urls: string[], health: Record<string, unknown> = { intervalMs: 0 }) {
  return parseConfig({
    listen: { host: '127.0.0.1', port: 0 },
    admin: { host: '127.0.0.1', port: 0 },
    health,
    discovery: { modelsIntervalMs: 0, metricsIntervalMs: 0 },
    engineLoad: { mode: 'off' },
    warmup: { requests: 0, connections: 0 },
    endpoints: [{ name: 'default', instances: urls }],
  })
}

describe('drain deadline', () => {
  it('a request still running is ended within delay + timeout, its settling counted in the timeout', async () => {
    const stub = await startStub('ok')
    const clock = new CountingClock()
    const { logger, lines } = capturedLog()
    const p = await ProxyServer.start(config([stub.url]), { logger, drainClock: clock })
    // A request whose body never finishes arriving: nothing the drain does can end it early.
    const client = net.connect(Number(new URL(p.url).port), '127.0.0.1')
    const closed = new Promise<void>((r) => client.once('close', () => r()))
    client.on('error', () => undefined)
    client.write('POST /v1/chat/completions HTTP/1.1\r\nhost: x\r\ncontent-type: application/json\r\ncontent-length: 1000\r\n\r\n{"model":')
    await until(() => p.requests.size === 1, 10_000, 'the request in flight')

    await p.shutdown({ delayMs: 500, timeoutMs: 1500 })
    await closed
    expect(clock.at).toBeLessThanOrEqual(2000)
    // Its phases in order: the delay, the wait for requests, then the end of what is left.
    expect(clock.sleeps[0]).toBe(500)
    expect(lines.map((l) => l.msg).filter((m) => typeof m === 'string' && /^drain/.test(m))).toEqual(['draining: /health answers 503', 'drain timeout: ending the requests still in flight'])
    await stub.close()
  })

  it('a health probe the instance has not answered does not hold the shutdown', async () => {
    let probes = 0
    const held: http.ServerResponse[] = []
    const stub = await startStub('slow health', (req, res) => {
      // The first probe (at start) passes; the next ones are never answered.
      if (req.url === '/health' && probes++ === 0) return void res.writeHead(200).end()
      if (req.url === '/health') return void held.push(res)
      res.writeHead(404).end()
    })
    // A probe timeout far beyond anything the test waits for: only closing it ends that probe.
    const p = await ProxyServer.start(config([stub.url], { intervalMs: 50, timeoutMs: 600_000, unhealthyThreshold: 100 }), { logger: capturedLog().logger })
    await until(() => held.length > 0, 10_000, 'a probe held by the instance')
    const ended = new Promise<void>((r) => held[0]!.once('close', () => r()))
    await p.shutdown({ delayMs: 0, timeoutMs: 0 })
    await ended
    await stub.close()
  })
})
