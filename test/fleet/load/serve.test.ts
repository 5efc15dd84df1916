// Load from the engines in a running router: simulated vLLM workers as its instances,
// requests sent straight to one of them (past the router, as another replica's would be),
// and the router steering around it once a scrape has shown them.
import { afterEach, describe, expect, it } from 'vitest'
import type { ProxyServer } from '../../../src/proxy/proxy.js'
import { startSimFleet, type SimFleet } from '../../../src/sim/index.js'
import { closeRouter, startRouter, startStub, testConfig, until, type Stub } from '../../proxy/helpers.js'
import { metricSum } from '../../cluster/helpers.js'
import { direct as directTo, homedAt, route as routeTo, type Held } from './helpers.js'

let fleet: SimFleet | undefined
let router: ProxyServer | undefined
let stubs: Stub[] = []
const held: Held[] = []
const direct = (url: string, n: number) => directTo(url, n, held)
const route = (contents: string[]) => routeTo(router!.url, contents)

afterEach(async () => {
  for (const a of held.splice(0)) a.abort()
  await closeRouter(router, 10_000)
  await fleet?.close()
  await Promise.all(stubs.map((s) => s.close()))
  router = fleet = undefined
  stubs = []
})

const engineRow = (id: string) => router!.endpoint(undefined)!.router.instances().find((i) => i.id === id)!

async function setup(routing: Record<string, unknown>, engineLoad: Record<string, unknown>) {
  // Slow simulated time: a direct request stays in its engine for minutes, the router's (one token) take a few ms.
  fleet = await startSimFleet({ instances: 4, profile: 'tiny', timeScale: 0.2 })
  // Scraped every 20 ms, but a scrape may take long on a busy machine: one later than 3 intervals
  // would be abandoned as late, and the instance routed on the router's own counts for a moment.
  router = await startRouter(fleet.urls, { routing, engineLoad: { intervalMs: 20, staleAfterMs: 10_000, ...engineLoad } })
  return { urls: fleet.urls, busy: fleet.urls[0]! }
}

describe('serve with load from the engines', () => {
  it('longest_prefix (engine load auto) sends new prompts away from an instance busy with requests that did not pass through it', async () => {
    const { urls, busy } = await setup({ strategy: 'longest_prefix', placement: 'hash' }, {})
    const before = homedAt(urls, busy, 4, 'longest_prefix', 'before')
    expect(new Set(await route(before))).toEqual(new Set([busy]))
    await direct(busy, 16)
    await until(() => engineRow(busy).engineInFlight === 16, 30_000, 'the busy engine scraped')
    const after = homedAt(urls, busy, 12, 'longest_prefix', 'after')
    const went = await route(after)
    expect(went.filter((i) => i === busy)).toEqual([])
    // The scrape is of the engine's requests less the router's own: its own came and went.
    expect(router!.endpoint(undefined)!.load!.status(busy)).toMatchObject({ state: 'engine', fallback: false, external: 16 })
  })

  it('with auto, least_outstanding_requests and prefix_aware read nothing; with on they count every client', async () => {
    const { urls, busy } = await setup({ strategy: 'least_outstanding_requests' }, {})
    const ep = router!.endpoint(undefined)!
    expect(ep.load).toBeUndefined()
    expect(ep.router.params.engineLoadAll).toBe(false)
    await direct(busy, 8)
    // On by reload: the scraper starts, the strategy counts what it reports.
    router!.reload(testConfig([{ name: 'default', instances: urls }], { log: { level: 'silent' }, routing: { strategy: 'least_outstanding_requests' }, engineLoad: { mode: 'on', intervalMs: 20 } }))
    expect(ep.router.params.engineLoadAll).toBe(true)
    await until(() => engineRow(busy).engineInFlight === 8, 30_000, 'the busy engine scraped')
    expect((await route(Array.from({ length: 12 }, (_, i) => `least ${i}`))).filter((i) => i === busy)).toEqual([])

    // prefix_aware's concurrency threshold (SageMaker's): requests at the instance from every client.
    router!.reload(testConfig([{ name: 'default', instances: urls }], { log: { level: 'silent' }, routing: { strategy: 'prefix_aware', concurrencyThreshold: 4 }, engineLoad: { mode: 'on', intervalMs: 20 } }))
    const homed = homedAt(urls, busy, 6, 'prefix_aware', 'threshold')
    expect((await route(homed)).filter((i) => i === busy)).toEqual([])
    // Off: nothing read, the figures back to zero, and the prompts go home again.
    router!.reload(testConfig([{ name: 'default', instances: urls }], { log: { level: 'silent' }, routing: { strategy: 'prefix_aware', concurrencyThreshold: 4 }, engineLoad: { mode: 'off' } }))
    expect(ep.load).toBeUndefined()
    expect(engineRow(busy).engineInFlight).toBe(0)
    expect(new Set(await route(homed))).toEqual(new Set([busy]))
  })

  it('/admin/instances and /metrics show the figures, the fallback and the scrapes; instances that leave stop being read', async () => {
    fleet = await startSimFleet({ instances: 2, profile: 'tiny', timeScale: 0.2 })
    const notVllm = await startStub('not-vllm')
    stubs.push(notVllm)
    const urls = [...fleet.urls, notVllm.url]
    router = await startRouter(urls, { routing: { strategy: 'longest_prefix' }, engineLoad: { intervalMs: 20 } })
    const ep = router.endpoint(undefined)!
    await direct(fleet.urls[1]!, 3)
    await until(() => ep.load!.status(fleet!.urls[1]!)!.external === 3 && ep.load!.status(notVllm.url)!.state === 'not_vllm', 30_000, 'the scrapes')
    const report = (await (await fetch(`${router.adminUrl}/admin/instances`)).json()) as { endpoints: { instances: { id: string; engineInFlight: number; engineLoad: Record<string, unknown> | null }[] }[] }
    const row = (id: string) => report.endpoints[0]!.instances.find((i) => i.id === id)!
    expect(row(fleet.urls[1]!).engineInFlight).toBe(3)
    expect(row(fleet.urls[1]!).engineLoad).toMatchObject({ state: 'engine', fallback: false, running: 3, waiting: 0, external: 3, reason: null })
    expect(row(fleet.urls[1]!).engineLoad!.at).toMatch(/^\d{4}-\d\d-\d\dT/)
    expect(row(fleet.urls[1]!).engineLoad!.kvCacheUsage).toBeGreaterThan(0)
    expect(row(notVllm.url).engineLoad).toMatchObject({ state: 'not_vllm', fallback: true, reason: expect.stringContaining('vllm:num_requests_running'), scrapes: { not_vllm: 1 } })

    const text = await (await fetch(`${router.adminUrl}/metrics`)).text()
    expect(metricSum(text, 'prefix_router_engine_load_requests', `instance="${fleet.urls[1]}",source="engine"`)).toBe(3)
    expect(metricSum(text, 'prefix_router_engine_load_requests', `instance="${fleet.urls[1]}",source="external"`)).toBe(3)
    expect(metricSum(text, 'prefix_router_engine_load_requests', `instance="${fleet.urls[1]}",source="own"`)).toBe(0)
    expect(metricSum(text, 'prefix_router_engine_load_scrapes_total', `instance="${fleet.urls[0]}",result="ok"`)).toBeGreaterThan(0)
    expect(metricSum(text, 'prefix_router_engine_load_scrapes_total', `instance="${notVllm.url}",result="not_vllm"`)).toBe(1)
    expect(metricSum(text, 'prefix_router_engine_load_fallback', `instance="${notVllm.url}"`)).toBe(1)
    expect(metricSum(text, 'prefix_router_engine_load_fallback', `instance="${fleet.urls[1]}"`)).toBe(0)
    expect(text).toMatch(new RegExp(`prefix_router_engine_load_age_seconds\\{endpoint="default",instance="${fleet.urls[1]}"\\} \\d`))
    expect(text).toMatch(new RegExp(`prefix_router_engine_kv_cache_usage\\{endpoint="default",instance="${fleet.urls[1]}"\\} 0\\.\\d`))

    // Marked down (as a refused connection does): out of rotation, no longer read; a reload
    // that drops an instance stops its scrapes too.
    ep.markDown(ep.instances.get(fleet.urls[1]!)!, 'test')
    expect(ep.load!.ids().sort()).toEqual([fleet.urls[0]!, notVllm.url].sort())
    router.reload(testConfig([{ name: 'default', instances: [fleet.urls[0]!] }], { log: { level: 'silent' }, routing: { strategy: 'longest_prefix' }, engineLoad: { intervalMs: 20 } }))
    expect(ep.load!.ids()).toEqual([fleet.urls[0]!])
    await router.close()
    expect(ep.load!.ids()).toEqual([])
    router = undefined
  })
})
