// Instances that fail in the ways production ones do: answering 503 or 500 to everything,
// hanging, resetting after the request was sent, or merely busy. Each test checks what the
// client sees, that ejection and retries are counted, and that every in-flight counter is
// back to 0 (useStubFleet checks that after each test).
import http from 'node:http'
import { describe, expect, it } from 'vitest'
import { ProxyServer } from '../../src/proxy/proxy.js'
import { capturedLog } from './log-lines.js'
import { chat, post, startStub, type Stub, testConfig, totalInFlight, until, useStubFleet } from '../proxy/helpers.js'

const ctx = useStubFleet()

type Handler = (req: http.IncomingMessage, res: http.ServerResponse, body: Buffer) => void

/** Health and models answered as a healthy vLLM would; generation by `gen`. */
function worker(gen: Handler, health: () => number = () => 200): Handler {
  return (req, res, body) => {
    if (req.url === '/health') {
      res.writeHead(health())
      return res.end()
    }
    if (req.url === '/v1/models') {
      res.writeHead(404)
      return res.end()
    }
    gen(req, res, body)
  }
}

const ok = (name: string): Handler => (_req, res) => {
  res.writeHead(200, { 'content-type': 'application/json' })
  res.end(JSON.stringify({ from: name }))
}
const failWith = (status: number): Handler => (_req, res) => {
  res.writeHead(status, { 'content-type': 'application/json' })
  res.end(JSON.stringify({ error: { message: `failing with ${status}`, type: 'server_error', code: status } }))
}

/** A router in front of stubs with the given handlers, and a log whose lines the test can read. */
async function fleetOf(handlers: Handler[], overrides: Record<string, unknown> = {}) {
  ctx.stubs = await Promise.all(handlers.map((h, i) => startStub(`s${i}`, h)))
  const { logger, lines } = capturedLog()
  const config = testConfig([{ name: 'default', instances: ctx.stubs.map((s) => s.url), routing: (overrides.routing as object | undefined) ?? {} }], {
    ...overrides,
    routing: undefined,
  })
  ctx.router = await ProxyServer.start(config, { logger })
  return { router: ctx.router, lines }
}

async function metric(r: ProxyServer, name: string): Promise<{ labels: string; value: number }[]> {
  const text = await (await fetch(`${r.adminUrl}/metrics`)).text()
  return text
    .split('\n')
    .filter((l) => l.startsWith(`${name}{`))
    .map((l) => ({ labels: l.slice(name.length, l.lastIndexOf(' ')), value: Number(l.slice(l.lastIndexOf(' ') + 1)) }))
}

const generations = (s: Stub) => s.seen.filter((x) => x.url === '/v1/chat/completions').length

describe('a fast-failing instance', () => {
  it('least_outstanding_requests: an instance answering 503 to everything costs the clients nothing (retried, then ejected)', async () => {
    // The healthy ones take a while to answer; the failing one answers at once, so under
    // concurrent load it always has the fewest requests in flight.
    const slow = (name: string): Handler => (req, res, body) => void setTimeout(() => ok(name)(req, res, body), 20)
    // Eight clients: a budget of eight retries lets every one of them retry at once.
    const { router, lines } = await fleetOf([worker(failWith(503)), worker(slow('a')), worker(slow('b'))], {
      routing: { strategy: 'least_outstanding_requests' },
      retries: { minRetryConcurrency: 8 },
    })
    const statuses: number[] = []
    await Promise.all(
      Array.from({ length: 8 }, async (_, c) => {
        for (let i = 0; i < 15; i++) statuses.push((await post(`${router.url}/v1/chat/completions`, chat(`c${c} q${i}`))).status)
      }),
    )
    expect(statuses).toHaveLength(120)
    expect(statuses.filter((s) => s !== 200)).toEqual([])
    const bad = ctx.stubs[0]!
    // Tried first while it looked least busy, until five failures in a row ejected it (plus
    // what the other clients had already sent it by then), then never again.
    const tried = generations(bad)
    expect(tried).toBeGreaterThanOrEqual(5)
    expect(tried).toBeLessThan(5 + 8)
    const ejections = await metric(router, 'prefix_router_ejections_total')
    expect(ejections).toEqual([{ labels: `{instance="${bad.url}",reason="consecutive_gateway_failure"}`, value: 1 }])
    const retries = await metric(router, 'prefix_router_retries_total')
    expect(retries).toEqual([{ labels: `{instance="${bad.url}",reason="503"}`, value: tried }])
    expect(lines.some((l) => l.msg === 'instance ejected' && l.instance === bad.url && l.reason === 'consecutive_gateway_failure')).toBe(true)
    const report = (await (await fetch(`${router.adminUrl}/admin/instances`)).json()) as { endpoints: { instances: { id: string; ejectedUntil: string | null; ejections: number }[] }[] }
    const row = report.endpoints[0]!.instances.find((i) => i.id === bad.url)!
    expect(row.ejections).toBe(1)
    expect(row.ejectedUntil).not.toBeNull()
  })

  it('prefix_aware: a 500 storm on one instance reaches clients only until the instance is ejected', async () => {
    const { router } = await fleetOf([worker(failWith(500)), worker(ok('a')), worker(ok('b')), worker(ok('c'))])
    const statuses: number[] = []
    for (let i = 0; i < 200; i++) statuses.push((await post(`${router.url}/v1/chat/completions`, chat(`prompt ${i} `.repeat(50)))).status)
    // 500 is the instance's own answer (not a gateway failure): passed through, and counted.
    expect(statuses.filter((s) => s === 500)).toHaveLength(5)
    expect(statuses.filter((s) => s !== 200 && s !== 500)).toEqual([])
    expect(generations(ctx.stubs[0]!)).toBe(5)
    expect(await metric(router, 'prefix_router_ejections_total')).toEqual([{ labels: `{instance="${ctx.stubs[0]!.url}",reason="consecutive_5xx"}`, value: 1 }])
  })

  it('never ejects more than maxEjectionPercent of an endpoint, and never the last instance', async () => {
    const { router, lines } = await fleetOf([worker(failWith(503)), worker(failWith(503))], { outlier: { maxEjectionPercent: 100 } })
    for (let i = 0; i < 30; i++) {
      const r = await post(`${router.url}/v1/chat/completions`, chat(`q${i}`))
      expect(r.status).toBe(503)
    }
    const report = (await (await fetch(`${router.adminUrl}/admin/instances`)).json()) as { endpoints: { instances: { ejectedUntil: string | null }[] }[] }
    expect(report.endpoints[0]!.instances.filter((i) => i.ejectedUntil !== null)).toHaveLength(1)
    expect(lines.some((l) => String(l.msg).includes('maxEjectionPercent'))).toBe(true)
    expect((await fetch(`${router.url}/health`)).status).toBe(200)
  })

  it('an ejected instance comes back once its ejection time is over and a probe passes', async () => {
    let failing = true
    const flaky: Handler = (req, res, body) => (failing ? failWith(503) : ok('flaky'))(req, res, body)
    const { router, lines } = await fleetOf([worker(flaky), worker(ok('a'))], {
      routing: { strategy: 'least_outstanding_requests' },
      outlier: { baseEjectionTimeMs: 200 },
    })
    for (let i = 0; !lines.some((l) => l.msg === 'instance ejected') && i < 500; i++) await post(`${router.url}/v1/chat/completions`, chat(`q${i}`))
    expect(lines.some((l) => l.msg === 'instance ejected')).toBe(true)
    failing = false
    await until(() => lines.some((l) => l.msg === 'instance returned after ejection'), 10_000, 'the return')
    const seen = new Set<string>()
    for (let i = 0; !seen.has(ctx.stubs[0]!.url) && i < 500; i++) seen.add((await post(`${router.url}/v1/chat/completions`, chat(`r${i}`))).headers.get('x-prefix-router-instance')!)
    expect(seen.has(ctx.stubs[0]!.url)).toBe(true)
  })
})

describe('retries', () => {
  it('a 503 goes to the next instance; the answer says how many retries it took', async () => {
    const { router } = await fleetOf([worker(failWith(503)), worker(ok('a'))], { routing: { strategy: 'random' }, outlier: { consecutiveGatewayFailure: 0, consecutive5xx: 0 } })
    const answers = []
    for (let i = 0; i < 20; i++) answers.push(await post(`${router.url}/v1/chat/completions`, chat(`q${i}`)))
    expect(answers.map((a) => a.status).filter((s) => s !== 200)).toEqual([])
    expect(answers.every((a) => a.headers.get('x-prefix-router-instance') === ctx.stubs[1]!.url)).toBe(true)
    const retried = answers.filter((a) => a.headers.get('x-prefix-router-retries') === '1').length
    expect(retried).toBe(generations(ctx.stubs[0]!))
    expect(retried).toBeGreaterThan(0)
    expect(await metric(router, 'prefix_router_retries_total')).toEqual([{ labels: `{instance="${ctx.stubs[0]!.url}",reason="503"}`, value: retried }])
  })

  it('with no budget left, the 503 is passed through rather than retried', async () => {
    const { router } = await fleetOf([worker(failWith(503)), worker(ok('a'))], {
      routing: { strategy: 'random' },
      retries: { budgetPercent: 0, minRetryConcurrency: 0 },
      outlier: { consecutiveGatewayFailure: 0, consecutive5xx: 0 },
    })
    const answers = []
    for (let i = 0; i < 20; i++) answers.push(await post(`${router.url}/v1/chat/completions`, chat(`q${i}`)))
    const failed = answers.filter((a) => a.status === 503)
    expect(failed.length).toBe(generations(ctx.stubs[0]!))
    expect(failed.length).toBeGreaterThan(0)
    expect(JSON.parse(failed[0]!.text)).toEqual({ error: { message: 'failing with 503', type: 'server_error', code: 503 } })
    expect(await metric(router, 'prefix_router_retries_total')).toEqual([])
  })

  it('a refused connection is retried even with no budget left: it never reached an instance', async () => {
    const { router } = await fleetOf([worker(ok('dead')), worker(ok('a'))], {
      routing: { strategy: 'random' },
      retries: { budgetPercent: 0, minRetryConcurrency: 0 },
    })
    await ctx.stubs[0]!.close()
    for (let i = 0; i < 10; i++) expect((await post(`${router.url}/v1/chat/completions`, chat(`q${i}`))).status).toBe(200)
  })

  it('retries.max bounds the tries: every instance failing gives the client one error after max + 1 tries', async () => {
    const { router } = await fleetOf([0, 1, 2, 3].map(() => worker(failWith(502))), { retries: { max: 2 }, outlier: { consecutiveGatewayFailure: 0, consecutive5xx: 0 } })
    const r = await post(`${router.url}/v1/chat/completions`, chat('one'))
    expect(r.status).toBe(502)
    expect(ctx.stubs.reduce((n, s) => n + generations(s), 0)).toBe(3)
  })

  it('a reset after the request was sent is not re-sent elsewhere, unless retries.onReset', async () => {
    const reset: Handler = (req) => req.socket.destroy()
    for (const onReset of [false, true]) {
      const { router } = await fleetOf([worker(reset), worker(ok('a'))], {
        routing: { strategy: 'random' },
        retries: { onReset },
        outlier: { consecutiveGatewayFailure: 0, consecutive5xx: 0 },
      })
      const answers = []
      for (let i = 0; i < 20; i++) answers.push(await post(`${router.url}/v1/chat/completions`, chat(`q${i}`)))
      const resets = generations(ctx.stubs[0]!)
      expect(resets).toBeGreaterThan(0)
      // Every request reached exactly one instance, unless the operator allowed the re-send.
      expect(generations(ctx.stubs[1]!)).toBe(onReset ? 20 : 20 - resets)
      const failed = answers.filter((a) => a.status !== 200)
      if (onReset) expect(failed).toEqual([])
      else {
        expect(failed).toHaveLength(resets)
        for (const f of failed) {
          expect([f.status, JSON.parse(f.text).error.code]).toEqual([502, 'upstream_reset'])
          // The router's own error answers name the instance too, with debugHeaders.
          expect(f.headers.get('x-prefix-router-instance')).toBe(ctx.stubs[0]!.url)
        }
      }
      await until(() => totalInFlight(router) === 0, 3000, 'in-flight back to 0')
      await router.close()
      await Promise.all(ctx.stubs.map((s) => s.close()))
      ctx.router = undefined
    }
  })

  it('an instance that accepts streams and never answers: the per-try timeout moves them on, and it is ejected', async () => {
    const hang: Handler = () => undefined
    const stream: Handler = (_req, res) => {
      res.writeHead(200, { 'content-type': 'text/event-stream' })
      res.end('data: {"choices":[]}\n\ndata: [DONE]\n\n')
    }
    const { router } = await fleetOf([worker(hang), worker(stream)], {
      routing: { strategy: 'least_outstanding_requests' },
      retries: { perTryTimeoutMs: 200 },
    })
    // Ties between idle instances are broken at random: send until the hung one has been tried 5 times.
    for (let i = 0; generations(ctx.stubs[0]!) < 5 && i < 500; i++) {
      const r = await post(`${router.url}/v1/chat/completions`, chat(`s${i}`, { stream: true }))
      expect(r.status).toBe(200)
      expect(r.headers.get('x-prefix-router-instance')).toBe(ctx.stubs[1]!.url)
    }
    for (let i = 0; i < 10; i++) await post(`${router.url}/v1/chat/completions`, chat(`after ${i}`, { stream: true }))
    expect(generations(ctx.stubs[0]!)).toBe(5)
    expect(await metric(router, 'prefix_router_ejections_total')).toEqual([{ labels: `{instance="${ctx.stubs[0]!.url}",reason="consecutive_gateway_failure"}`, value: 1 }])
    expect((await metric(router, 'prefix_router_retries_total'))[0]).toEqual({ labels: `{instance="${ctx.stubs[0]!.url}",reason="timeout"}`, value: 5 })
  })
})

describe('outlier detection counts answers as they start', () => {
  it('an instance whose long streams succeed between quick 503s is not ejected: each stream counts when it starts', async () => {
    const held: http.ServerResponse[] = []
    let n = 0
    const alternating: Handler = (req, res, body) => {
      if (n++ % 2 === 1) return failWith(503)(req, res, body)
      res.writeHead(200, { 'content-type': 'text/event-stream' })
      res.write('data: {"choices":[]}\n\n')
      held.push(res)
    }
    const { router } = await fleetOf([worker(alternating), worker(ok('a'))], {
      routing: { strategy: 'least_outstanding_requests' },
      retries: { max: 0 },
      outlier: { consecutiveGatewayFailure: 3 },
    })
    const victim = ctx.stubs[0]!
    // One request at a time; each client drops its stream once it has started, so a stream never
    // reaches its end and only its start can count as a success.
    for (let i = 0; generations(victim) < 12 && i < 500; i++) {
      const r = await fetch(`${router.url}/v1/chat/completions`, { method: 'POST', body: chat(`q${i}`, { stream: true }), headers: { 'content-type': 'application/json' } })
      void r.body?.cancel().catch(() => undefined)
    }
    expect(generations(victim)).toBe(12)
    expect(await metric(router, 'prefix_router_ejections_total')).toEqual([])
    for (const res of held.splice(0)) res.end('data: [DONE]\n\n')
  })

  it('an ejected instance that goes down and comes back up (a restart) returns without serving out its ejection', async () => {
    let healthy = true
    let failing = true
    const flaky: Handler = (req, res, body) => (failing ? failWith(503) : ok('flaky'))(req, res, body)
    const { router, lines } = await fleetOf([worker(flaky, () => (healthy ? 200 : 503)), worker(ok('a'))], {
      routing: { strategy: 'random' },
      health: { intervalMs: 20, timeoutMs: 2000, healthyThreshold: 2, unhealthyThreshold: 1 },
      outlier: { baseEjectionTimeMs: 3_600_000 },
    })
    for (let i = 0; !lines.some((l) => l.msg === 'instance ejected') && i < 500; i++) await post(`${router.url}/v1/chat/completions`, chat(`q${i}`))
    healthy = false
    await until(() => lines.some((l) => l.msg === 'instance down'), 10_000, 'down')
    failing = false
    healthy = true
    await until(() => lines.some((l) => l.msg === 'instance up'), 10_000, 'up')
    expect(lines.find((l) => l.msg === 'instance up')).toMatchObject({ instance: ctx.stubs[0]!.url, ejectionLifted: true })
    const seen = new Set<string>()
    for (let i = 0; !seen.has(ctx.stubs[0]!.url) && i < 500; i++) seen.add((await post(`${router.url}/v1/chat/completions`, chat(`r${i}`))).headers.get('x-prefix-router-instance')!)
    expect(seen.has(ctx.stubs[0]!.url)).toBe(true)
  })
})

describe('health probes', () => {
  it('a busy instance (every traffic connection held) still passes its probes: they have their own connections', async () => {
    const held: http.ServerResponse[] = []
    const busy: Handler = (_req, res) => void held.push(res)
    const { router } = await fleetOf([worker(busy)], { upstream: { connections: 4 }, health: { intervalMs: 50, timeoutMs: 300 } })
    const pending = Array.from({ length: 40 }, (_, i) => post(`${router.url}/v1/chat/completions`, chat(`b${i}`)))
    await until(() => held.length === 4, 10_000, 'the traffic pool to fill')
    const probesBefore = ctx.stubs[0]!.seen.filter((s) => s.url === '/health').length
    await until(() => ctx.stubs[0]!.seen.filter((s) => s.url === '/health').length >= probesBefore + 10, 20_000, 'ten probes')
    expect((await fetch(`${router.url}/health`)).status).toBe(200)
    for (const res of held.splice(0)) ok('x')(undefined as never, res, Buffer.alloc(0))
    // The rest drain through the 4 connections as answers come back.
    const drain = setInterval(() => {
      for (const res of held.splice(0)) ok('x')(undefined as never, res, Buffer.alloc(0))
    }, 5)
    const statuses = (await Promise.all(pending)).map((r) => r.status)
    clearInterval(drain)
    expect(statuses.every((s) => s === 200)).toBe(true)
  })

  it('rise and fall: down after unhealthyThreshold failed probes, up after healthyThreshold passes, each change logged', async () => {
    let status = 200
    const { router, lines } = await fleetOf([worker(ok('a'), () => status), worker(ok('b'))], {
      health: { intervalMs: 30, timeoutMs: 2000, healthyThreshold: 2, unhealthyThreshold: 3 },
    })
    const probes = () => ctx.stubs[0]!.seen.filter((s) => s.url === '/health').length
    const inRotation = async () => {
      const r = (await (await fetch(`${router.adminUrl}/admin/instances`)).json()) as { endpoints: { instances: { id: string; healthy: boolean }[] }[] }
      return r.endpoints[0]!.instances.find((i) => i.id === ctx.stubs[0]!.url)!.healthy
    }
    status = 503
    const failedFrom = probes()
    await until(() => probes() >= failedFrom + 2, 10_000, 'two failed probes')
    // Probes are not synchronised with this check; what is certain is the order of events.
    await until(() => lines.some((l) => l.msg === 'instance down'), 10_000, 'down')
    expect(probes()).toBeGreaterThanOrEqual(failedFrom + 3)
    const down = lines.find((l) => l.msg === 'instance down')!
    expect(down.instance).toBe(ctx.stubs[0]!.url)
    expect(down.reason).toBe('health check answered 503')
    expect(await inRotation()).toBe(false)
    status = 200
    const passedFrom = probes()
    await until(() => lines.some((l) => l.msg === 'instance up'), 10_000, 'up')
    expect(probes()).toBeGreaterThanOrEqual(passedFrom + 2)
    expect(await inRotation()).toBe(true)
  })
})

describe('an instance killed under load', () => {
  it('streams already running on it end with an error event; requests after it died are retried elsewhere', async () => {
    const open: http.ServerResponse[] = []
    const sse: Handler = (_req, res) => {
      res.writeHead(200, { 'content-type': 'text/event-stream' })
      res.write('data: {"choices":[{"delta":{"content":"x"}}]}\n\n')
      open.push(res)
    }
    const quick: Handler = (_req, res) => {
      res.writeHead(200, { 'content-type': 'text/event-stream' })
      res.end('data: {"choices":[]}\n\ndata: [DONE]\n\n')
    }
    const { router } = await fleetOf([worker(sse), worker(quick)], { routing: { strategy: 'random' } })
    // Random placement: send until 5 streams are running on the victim (the rest finish on the other).
    const running: Promise<string>[] = []
    for (let i = 0; open.length < 5 && i < 1000; i++) {
      const r = await fetch(`${router.url}/v1/chat/completions`, { method: 'POST', body: chat(`r${i}`, { stream: true }), headers: { 'content-type': 'application/json' } })
      if (r.headers.get('x-prefix-router-instance') === ctx.stubs[0]!.url) running.push(r.text())
      else expect(await r.text()).toContain('[DONE]')
    }
    expect(running).toHaveLength(5)
    const victim = ctx.stubs[0]!
    victim.server.closeAllConnections()
    victim.server.close()
    const cut = await Promise.all(running)
    for (const body of cut) {
      expect(body).not.toContain('[DONE]')
      expect(body).toMatch(/"code":"upstream_stream_error"/)
    }
    // After it died: refused connections are retried on the other instance, and it is out of
    // rotation (ejected after five cut streams, or marked down by a refused connection).
    for (let i = 0; i < 10; i++) {
      const r = await post(`${router.url}/v1/chat/completions`, chat(`after ${i}`, { stream: true }))
      expect(r.status).toBe(200)
      expect(r.text).toContain('[DONE]')
    }
    expect(await metric(router, 'prefix_router_instance_healthy')).toContainEqual({ labels: `{endpoint="default",instance="${victim.url}"}`, value: 0 })
  })
})
