// serve --workers: the primary reads the engines once for the host and writes the figures to
// the shared routing state, where every worker's picks see them.
import { mkdtempSync, rmSync, writeFileSync } from 'node:fs'
import { tmpdir } from 'node:os'
import path from 'node:path'
import { afterEach, describe, expect, it } from 'vitest'
import { startSimFleet, type SimFleet } from '../../../src/sim/index.js'
import { until } from '../../proxy/helpers.js'
import { metrics, metricSum, serve, stop, type Served } from '../../cluster/helpers.js'
import { direct, homedAt, metricsServer, route, type MetricsServer, type Held } from './helpers.js'

let fleet: SimFleet | undefined
let counted: MetricsServer | undefined
let served: Served | undefined
let dir: string | undefined
const held: Held[] = []

afterEach(async () => {
  for (const a of held.splice(0)) a.abort()
  await stop(served)
  await fleet?.close()
  await counted?.close()
  if (dir) rmSync(dir, { recursive: true, force: true })
  served = fleet = counted = dir = undefined
})

describe('serve --workers 2 with load from the engines', () => {
  it('the primary alone scrapes, and the workers route around what it reads', async () => {
    fleet = await startSimFleet({ instances: 4, profile: 'tiny', timeScale: 0.2 })
    // An endpoint of its own whose only instance counts the GETs of its /metrics.
    counted = await metricsServer('ok')
    dir = mkdtempSync(path.join(tmpdir(), 'engine-load-'))
    const file = path.join(dir, 'config.json')
    writeFileSync(
      file,
      JSON.stringify({
        routing: { strategy: 'longest_prefix', placement: 'hash' },
        // No other GET of /metrics than the scraper's.
        discovery: { metricsIntervalMs: 0 },
        warmup: { requests: 0, connections: 0 },
        endpoints: [
          { name: 'default', instances: fleet.urls },
          { name: 'counted', instances: [counted.url] },
        ],
      }),
    )
    served = await serve(['--config', file, '--workers', '2', '--engine-load-interval-ms', '20'])
    const scrapes = async () => metricSum(await metrics(served!.admin), 'prefix_router_engine_load_scrapes_total', `instance="${counted!.url}"`)
    await until(async () => (await scrapes()) >= 20, 30_000, 'twenty scrapes of the counted instance')
    // Read before the primary's count: at most the one scrape in flight is not counted yet. A
    // worker scraping too would have doubled what the instance saw.
    const seen = counted.metricsRequests
    const total = await scrapes()
    expect(seen).toBeLessThanOrEqual(total + 1)
    expect(seen).toBeGreaterThanOrEqual(20)

    const busy = fleet.urls[0]!
    const before = homedAt(fleet.urls, busy, 4, 'longest_prefix', 'before')
    expect(new Set(await route(served.url, before))).toEqual(new Set([busy]))
    await direct(busy, 16, held)
    await until(
      async () => {
        const r = (await (await fetch(`${served!.admin}/admin/instances`)).json()) as { endpoints: { name: string; instances: { id: string; engineInFlight: number }[] }[] }
        return r.endpoints.find((e) => e.name === 'default')!.instances.find((i) => i.id === busy)!.engineInFlight === 16
      },
      30_000,
      'the busy engine scraped',
    )
    const after = homedAt(fleet.urls, busy, 12, 'longest_prefix', 'after')
    const went = await route(served.url, after)
    expect(went.filter((i) => i === busy)).toEqual([])
  })
})
