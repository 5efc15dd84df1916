// A worker killed while it holds requests: the primary replaces it, and nothing it held
// stays counted in flight.
import { describe, expect, it } from 'vitest'
import { releaseHeld, until } from '../proxy/helpers.js'
import { clientsOnDistinctWorkers, holdingStub, metrics, metricSum, serve, untilMetric, clusterFixture } from './helpers.js'

const f = clusterFixture()

describe('serve --workers: a worker that dies', () => {
  it('is replaced, and its requests in flight no longer count', async () => {
    f.stubs = await Promise.all(['a', 'b'].map((n) => holdingStub(n)))
    for (const s of f.stubs) s.hold = true
    f.served = await serve(['--workers', '2', ...f.stubs.flatMap((s) => ['--upstream', s.url])])
    const [a, b] = await clientsOnDistinctWorkers(f.served.url, 2)
    f.clients.push(a!.client, b!.client)
    const held = () => f.stubs.reduce((n, s) => n + s.held.length, 0)
    const ra = a!.client.chat('first prompt '.repeat(20))
    await until(() => held() === 1, 50_000, 'one request held')
    const rb = b!.client.chat('second prompt '.repeat(20))
    await until(() => held() === 2, 50_000, 'two requests held')
    await untilMetric(f.served.admin, 'prefix_router_in_flight', 2)

    process.kill(Number(a!.pid), 'SIGKILL')
    await expect(ra).rejects.toThrow()
    await untilMetric(f.served.admin, 'prefix_router_in_flight', 1)
    await untilMetric(f.served.admin, 'prefix_router_workers', 2)
    expect(metricSum(await metrics(f.served.admin), 'prefix_router_worker_restarts_total')).toBe(1)
    // The primary ended the lease the dead worker held on the shared state.
    const exit = f.served.stdout().split('\n').find((l) => l.includes('worker exited; starting another'))
    expect(JSON.parse(exit!)).toMatchObject({ level: 40, worker: Number(a!.pid), signal: 'SIGKILL', releasedLeases: 1 })

    // The replacement takes connections: two workers again, the killed one not among them.
    const fresh = await clientsOnDistinctWorkers(f.served.url, 2)
    f.clients.push(...fresh.map((f) => f.client))
    const pids = fresh.map((f) => f.pid)
    expect(pids).toContain(b!.pid)
    expect(pids).not.toContain(a!.pid)

    releaseHeld(f.stubs)
    expect((await rb).status).toBe(200)
    await untilMetric(f.served.admin, 'prefix_router_in_flight', 0)
  })
})
