// The warm-up a starting proxy runs: before its front port accepts anything, on throwaway
// copies only (the live routers, metrics and upstreams see none of it), closed afterwards,
// and skipped when configured to 0; then the connections it opens to the live instances.
import net from 'node:net'
import { Writable } from 'node:stream'
import { pino } from 'pino'
import { afterEach, describe, expect, it } from 'vitest'
import { ProxyServer } from '../../src/proxy/proxy.js'
import { warmUp } from '../../src/proxy/warm.js'
import { freePort } from '../helpers/ports.js'
import { releaseHeld, startStub, testConfig, totalInFlight, until, type Stub } from './helpers.js'

interface Line {
  msg: string
  requests?: number
  errors?: number
  at: number
}

/** A logger whose lines are kept, each stamped with when it was written. */
function capture(): { logger: pino.Logger; lines: Line[] } {
  const lines: Line[] = []
  const dest = new Writable({
    write(chunk: Buffer, _enc, cb) {
      for (const l of chunk.toString().split('\n').filter(Boolean)) lines.push({ ...(JSON.parse(l) as Line), at: performance.now() })
      cb()
    },
  })
  return { logger: pino({ level: 'info' }, dest), lines }
}

/** Tries to connect to the port every few ms; resolves with the time of the first accepted connection and the refusals before it. */
function firstAccept(port: number): { done: Promise<{ at: number; refused: number }>; stop(): void } {
  let stopped = false
  let refused = 0
  const done = new Promise<{ at: number; refused: number }>((resolve, reject) => {
    const attempt = () => {
      if (stopped) return reject(new Error('stopped before the port accepted'))
      const s = net.connect(port, '127.0.0.1')
      s.once('connect', () => {
        const at = performance.now()
        s.destroy()
        resolve({ at, refused })
      })
      s.once('error', () => {
        refused++
        setTimeout(attempt, 2)
      })
    }
    attempt()
  })
  return { done, stop: () => (stopped = true) }
}

const listeningServers = () => process.getActiveResourcesInfo().filter((r) => r === 'TCPServerWrap').length

/**
 * Listening servers once those closed a moment ago (freePort's, the last test's) are gone:
 * libuv lets go of a closed handle in a later phase of the loop than close()'s callback.
 */
async function settledServers(): Promise<number> {
  for (let i = 0; i < 3; i++) await new Promise((r) => setImmediate(r))
  return listeningServers()
}

describe('warm-up before the front port opens', () => {
  let proxy: ProxyServer | undefined
  let stub: Stub | undefined
  afterEach(async () => {
    await proxy?.close()
    await stub?.close()
    proxy = stub = undefined
  })

  it('runs before the port accepts, through the handler, and touches nothing live', async () => {
    stub = await startStub('live')
    const port = await freePort()
    const { logger, lines } = capture()
    const config = testConfig([{ name: 'default', instances: [stub.url], routing: { strategy: 'longest_prefix' } }], {
      listen: { host: '127.0.0.1', port },
      warmup: { requests: 400, timeoutMs: 600_000 },
    })
    const serversBefore = await settledServers()
    const probe = firstAccept(port)
    proxy = await ProxyServer.start(config, { logger })
    const accepted = await probe.done

    const warmed = lines.find((l) => l.msg === 'warmed up')
    expect(warmed, JSON.stringify(lines)).toBeDefined()
    // Every request went through the throwaway proxy to its sink and came back 200.
    expect(warmed).toMatchObject({ requests: 400, errors: 0 })
    // The port was tried (and refused) while the warm-up ran, and first accepted after it ended.
    expect(accepted.refused).toBeGreaterThan(0)
    expect(accepted.at).toBeGreaterThan(warmed!.at)

    // Nothing of the live fleet: no request reached its instance, no lease, no index entry, no sample.
    expect(stub.seen.filter((r) => r.method === 'POST')).toEqual([])
    const ep = proxy.endpoint(undefined)!
    expect(totalInFlight(proxy)).toBe(0)
    expect(ep.router.stats().indexEntries).toBe(0)
    expect([...ep.instances.values()].map((i) => i.requests)).toEqual([0])
    const metrics = await proxy.metrics.registry.getMetricsAsJSON()
    const samples = (name: string) => metrics.find((m) => m.name === name)!.values.filter((v) => v.value > 0)
    expect(samples('prefix_router_requests_total')).toEqual([])
    expect(samples('prefix_router_routing_decision_seconds')).toEqual([])
    expect(samples('prefix_router_upstream_ttfb_seconds')).toEqual([])
    // The request log is the live logger's: the warm-up's access lines went elsewhere.
    expect(lines.filter((l) => l.msg === 'request')).toEqual([])
    // Its sink and servers are closed (libuv lets go of a closed handle a moment later): only
    // the live front and admin ports stay.
    await until(() => listeningServers() === serversBefore + 2, 30_000, 'the warm-up servers to close')

    // And the live path still works, counted where it should be.
    const res = await fetch(`${proxy.url}/v1/chat/completions`, { method: 'POST', headers: { 'content-type': 'application/json' }, body: JSON.stringify({ model: 'm', messages: [{ role: 'user', content: 'a long enough prompt to fill index blocks. '.repeat(100) }] }) })
    expect(res.status).toBe(200)
    await res.arrayBuffer()
    expect(stub.seen.filter((r) => r.method === 'POST')).toHaveLength(1)
    expect(ep.router.stats().indexEntries).toBeGreaterThan(0)
  })

  it('is skipped with warmup.requests 0', async () => {
    stub = await startStub('live')
    const { logger, lines } = capture()
    proxy = await ProxyServer.start(testConfig([{ name: 'default', instances: [stub.url] }], { warmup: { requests: 0 } }), { logger })
    expect(lines.map((l) => l.msg)).not.toContain('warmed up')
    expect(proxy.config.warmup.requests).toBe(0)
  })

  it('covers every endpoint, each with its own routing', async () => {
    stub = await startStub('live')
    const { logger, lines } = capture()
    const config = testConfig(
      [
        { name: 'a', instances: [stub.url], routing: { strategy: 'random' } },
        { name: 'b.v2', instances: [stub.url], routing: { strategy: 'longest_prefix' } },
      ],
      { warmup: { requests: 64, timeoutMs: 600_000 } },
    )
    proxy = await ProxyServer.start(config, { logger })
    expect(lines.find((l) => l.msg === 'warmed up')).toMatchObject({ requests: 64, errors: 0 })
    expect(stub.seen.filter((r) => r.method === 'POST')).toEqual([])
  })

  it('stops at its time bound, and a throwaway server that fails to start is reported, not thrown', async () => {
    const config = testConfig([{ name: 'default', instances: ['http://127.0.0.1:9'] }])
    const before = await settledServers()
    const start = (c: typeof config, logger: pino.Logger) => ProxyServer.start(c, { logger, processMetrics: false })
    const bounded = await warmUp(config, 1000, 0, start)
    expect(bounded).toMatchObject({ requests: 0, errors: 0, timedOut: true })
    const failed = await warmUp(config, 10, 600_000, () => Promise.reject(new Error('cannot start')))
    expect(failed).toMatchObject({ requests: 0, failure: 'cannot start' })
    // The sink, and the throwaway server of the first, are closed either way.
    await until(() => listeningServers() === before, 30_000, 'the warm-up servers to close')
  })

  // Then the connections to the live instances, right before the port opens.

  /** Counts the TCP connections a stub accepts. */
  const countConnections = (s: Stub) => {
    const c = { n: 0 }
    s.server.on('connection', () => c.n++)
    return c
  }
  const healthGets = (s: Stub) => s.seen.filter((r) => r.method === 'GET' && r.url === '/health').length

  it('opens warmup.connections on the traffic pool, which the first concurrent requests then use', async () => {
    stub = await startStub('live')
    const conns = countConnections(stub)
    const config = testConfig([{ name: 'default', instances: [stub.url] }], { warmup: { requests: 0, connections: 6 } })
    proxy = await ProxyServer.start(config)
    // The probe round's GET, and one per connection opened.
    expect(healthGets(stub)).toBe(1 + 6)
    const before = conns.n
    expect(before).toBeGreaterThanOrEqual(6)
    // Six requests at once, held by the instance so that each needs a connection of its own:
    // all six find one open, and the instance accepts no new connection.
    stub.hold = true
    const body = JSON.stringify({ model: 'm', messages: [{ role: 'user', content: 'hello' }] })
    const answers = Array.from({ length: 6 }, () => fetch(`${proxy!.url}/v1/chat/completions`, { method: 'POST', headers: { 'content-type': 'application/json' }, body }))
    await until(() => stub!.held.length === 6, 30_000, 'the six requests to reach the instance')
    expect(conns.n).toBe(before)
    releaseHeld([stub])
    for (const r of await Promise.all(answers)) {
      expect(r.status).toBe(200)
      await r.arrayBuffer()
    }
  })

  it('is skipped with warmup.connections 0', async () => {
    stub = await startStub('live')
    proxy = await ProxyServer.start(testConfig([{ name: 'default', instances: [stub.url] }], { warmup: { requests: 0, connections: 0 } }))
    expect(healthGets(stub)).toBe(1)
  })

  it('never stops the start: an instance that resets or does not answer is counted as failed', async () => {
    // Both pass the probe round, then one resets every later health check and the other never answers it.
    const flaky = (mode: 'reset' | 'silent') => {
      let checks = 0
      return startStub(mode, (req, res) => {
        if (req.url === '/health' && checks++ > 0) return mode === 'reset' ? void req.socket.destroy() : undefined
        res.writeHead(req.url === '/v1/models' ? 404 : 200, { 'content-type': 'application/json' })
        res.end(req.method === 'POST' ? '{"ok":true}' : '{}')
      })
    }
    const [reset, silent] = await Promise.all([flaky('reset'), flaky('silent')])
    try {
      const { logger, lines } = capture()
      logger.level = 'debug'
      const config = testConfig([{ name: 'default', instances: [reset.url, silent.url] }], { warmup: { requests: 0, connections: 3 }, health: { intervalMs: 0, timeoutMs: 300 } })
      proxy = await ProxyServer.start(config, { logger })
      expect(lines.find((l) => l.msg === 'upstream connections opened')).toMatchObject({ opened: 0, failed: 6 })
      // Both stay in rotation (these were no health checks), and the proxy serves.
      const res = await fetch(`${proxy.url}/v1/chat/completions`, { method: 'POST', headers: { 'content-type': 'application/json' }, body: JSON.stringify({ model: 'm', messages: [{ role: 'user', content: 'hello' }] }) })
      expect(res.status).toBe(200)
      await res.arrayBuffer()
      expect([...proxy.endpoint(undefined)!.instances.values()].map((i) => i.inRotation)).toEqual([true, true])
    } finally {
      await Promise.all([reset.close(), silent.close()])
    }
  })
})
