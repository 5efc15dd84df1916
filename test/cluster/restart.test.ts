// A worker killed while it holds requests: the primary replaces it, and nothing it held
// stays counted in flight.
import { afterEach, describe, expect, it } from 'vitest'
import { releaseHeld, until, type Stub } from '../proxy/helpers.js'
import { type Client, clientsOnDistinctWorkers, holdingStub, metrics, metricSum, serve, type Served, stop, untilMetric } from './helpers.js'

let stubs: Stub[] = []
let served: Served | undefined
const clients: Client[] = []

afterEach(async () => {
  releaseHeld(stubs)
  for (const c of clients.splice(0)) c.close()
  await stop(served)
  served = undefined
  await Promise.all(stubs.map((s) => s.close()))
  stubs = []
})

describe('serve --workers: a worker that dies', () => {
  it('is replaced, and its requests in flight no longer count', async () => {
    stubs = await Promise.all(['a', 'b'].map((n) => holdingStub(n)))
    for (const s of stubs) s.hold = true
    served = await serve(['--workers', '2', ...stubs.flatMap((s) => ['--upstream', s.url])])
    const [a, b] = await clientsOnDistinctWorkers(served.url, 2)
    clients.push(a!.client, b!.client)
    const held = () => stubs.reduce((n, s) => n + s.held.length, 0)
    const ra = a!.client.chat('first prompt '.repeat(20))
    await until(() => held() === 1, 50_000, 'one request held')
    const rb = b!.client.chat('second prompt '.repeat(20))
    await until(() => held() === 2, 50_000, 'two requests held')
    await untilMetric(served.admin, 'prefix_router_in_flight', 2)

    process.kill(Number(a!.pid), 'SIGKILL')
    await expect(ra).rejects.toThrow()
    await untilMetric(served.admin, 'prefix_router_in_flight', 1)
    await untilMetric(served.admin, 'prefix_router_workers', 2)
    expect(metricSum(await metrics(served.admin), 'prefix_router_worker_restarts_total')).toBe(1)
    // The primary ended the lease the dead worker held on the shared state.
    const exit = served.stdout().split('\n').find((l) => l.includes('worker exited; starting another'))
    expect(JSON.parse(exit!)).toMatchObject({ level: 40, worker: Number(a!.pid), signal: 'SIGKILL', releasedLeases: 1 })

    // The replacement takes connections: two workers again, the killed one not among them.
    const fresh = await clientsOnDistinctWorkers(served.url, 2)
    clients.push(...fresh.map((f) => f.client))
    const pids = fresh.map((f) => f.pid)
    expect(pids).toContain(b!.pid)
    expect(pids).not.toContain(a!.pid)

    releaseHeld(stubs)
    expect((await rb).status).toBe(200)
    await untilMetric(served.admin, 'prefix_router_in_flight', 0)
  })
})
