// SIGTERM to the primary drains every worker as one process drains, and the admin port's
// /metrics is the sum of the workers' counters.
import net from 'node:net'
import { describe, expect, it } from 'vitest'
import { releaseHeld, until } from '../proxy/helpers.js'
import { clientsOnDistinctWorkers, holdingStub, metrics, metricSum, serve, untilMetric, clusterFixture } from './helpers.js'

const f = clusterFixture()

function refused(url: string): Promise<boolean> {
  const { hostname, port } = new URL(url)
  return new Promise((resolve) => {
    const s = net.connect(Number(port), hostname)
    s.once('connect', () => {
      s.destroy()
      resolve(false)
    })
    s.once('error', (err: NodeJS.ErrnoException) => resolve(err.code === 'ECONNREFUSED'))
  })
}

describe('serve --workers: metrics and drain', () => {
  it("/metrics sums both workers' requests; SIGTERM lets requests in flight finish, then refuses connections and exits 0", async () => {
    f.stubs = await Promise.all(['a', 'b'].map((n) => holdingStub(n)))
    f.served = await serve(['--workers', '2', '--drain-delay-ms', '0', ...f.stubs.flatMap((s) => ['--upstream', s.url])])
    const workers = await clientsOnDistinctWorkers(f.served.url, 2)
    f.clients.push(...workers.map((w) => w.client))
    for (const { client } of workers) {
      for (let i = 0; i < 3; i++) expect((await client.chat(`prompt ${i} `.repeat(20))).status).toBe(200)
    }
    // Three answered by each worker: only the sum of both registries makes six.
    await untilMetric(f.served.admin, 'prefix_router_requests_total', 6, 'instance="http')
    const text = await metrics(f.served.admin)
    expect(metricSum(text, 'prefix_router_requests_total', 'instance="http')).toBe(6)
    expect(metricSum(text, 'prefix_router_request_duration_seconds_count', 'status="200"')).toBe(6)
    expect(metricSum(text, 'prefix_router_workers')).toBe(2)
    // The primary's /admin/instances counts the workers' requests per instance too.
    const requests = async () => {
      const r = (await (await fetch(`${f.served!.admin}/admin/instances`)).json()) as { endpoints: { instances: { requests: number }[] }[] }
      return r.endpoints[0]!.instances.reduce((n, i) => n + i.requests, 0)
    }
    await until(async () => (await requests()) === 6, 50_000, '/admin/instances counting 6 requests')

    for (const s of f.stubs) s.hold = true
    const held = () => f.stubs.reduce((n, s) => n + s.held.length, 0)
    const inFlight = workers.map(({ client }, i) => client.chat(`held ${i} `.repeat(20)))
    await until(() => held() === 2, 50_000, 'one request held on each worker')

    f.served.child.kill('SIGTERM')
    await until(() => refused(f.served!.url), 50_000, 'the front port refusing connections')
    expect(f.served.child.exitCode).toBeNull()
    releaseHeld(f.stubs)
    expect((await Promise.all(inFlight)).map((a) => a.status)).toEqual([200, 200])
    expect(await f.served.exited).toBe(0)
  })
})
