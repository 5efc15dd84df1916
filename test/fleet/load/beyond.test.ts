// The load beyond a router's own leases has two sources, the engines' in-flight figure and
// the other replicas' queued prefill; neither may overwrite the other in the router.
import { afterEach, describe, expect, it } from 'vitest'
import { Router } from '../../../src/core/router.js'
import { LoadBeyondOwn } from '../../../src/fleet/load/beyond.js'
import type { ProxyServer } from '../../../src/proxy/proxy.js'
import { startSimFleet, type SimFleet } from '../../../src/sim/index.js'
import { startRouter, until } from '../../proxy/helpers.js'
import { direct, type Held } from './helpers.js'

const routers: Router[] = []
let fleet: SimFleet | undefined
let proxy: ProxyServer | undefined
const held: Held[] = []
afterEach(async () => {
  for (const a of held.splice(0)) a.abort()
  routers.splice(0).forEach((r) => r.close())
  await proxy?.close()
  await fleet?.close()
  proxy = fleet = undefined
})

describe('LoadBeyondOwn', () => {
  it("keeps each source's figure when the other writes", () => {
    const r = new Router({ instances: [{ id: 'a' }, { id: 'b' }] })
    routers.push(r)
    const b = new LoadBeyondOwn(r)
    const row = (id: string) => r.instances().find((i) => i.id === id)!
    b.setSharedPrefill('a', 120)
    b.engineSink().setEngineLoad('a', 7, 0)
    expect([row('a').engineInFlight, row('a').engineQueuedPrefillBlocks]).toEqual([7, 120])
    b.setSharedPrefill('a', 30)
    expect([row('a').engineInFlight, row('a').engineQueuedPrefillBlocks]).toEqual([7, 30])
    // The scraper's fallback is its own figure at 0, not the other's.
    b.engineSink().setEngineLoad('a', 0, 0)
    expect([row('a').engineInFlight, row('a').engineQueuedPrefillBlocks]).toEqual([0, 30])
    expect(b.setSharedPrefill('nope', 5)).toBe(false)
    expect(row('b').engineQueuedPrefillBlocks).toBe(0)
    // Ids the router does not have (another replica may name any) are not kept.
    for (let i = 0; i < 1000; i++) expect(b.setSharedPrefill(`http://stranger-${i}:8000`, 5)).toBe(false)
    expect(b.size).toBe(1)
    // A figure the router refuses is not kept: the other source's next write does not carry it.
    expect(() => b.setSharedPrefill('a', 2 ** 54)).toThrow(/prefillBlocks/)
    expect(() => b.engineSink().setEngineLoad('a', 3, 0)).not.toThrow()
    expect([row('a').engineInFlight, row('a').engineQueuedPrefillBlocks]).toEqual([3, 30])
  })

  it("in serve, the other replicas' prefill stays while the scraper writes the engine's requests", async () => {
    fleet = await startSimFleet({ instances: 2, profile: 'tiny', timeScale: 0.2 })
    proxy = await startRouter(fleet.urls, { routing: { strategy: 'longest_prefix' }, engineLoad: { intervalMs: 20 } })
    const ep = proxy.endpoint(undefined)!
    const busy = fleet.urls[0]!
    expect(ep.owner!.setSharedPrefill(busy, 64)).toBe(true)
    await direct(busy, 4, held)
    const row = () => ep.router.instances().find((i) => i.id === busy)!
    await until(() => row().engineInFlight === 4, 30_000, "the engine's figure")
    expect(row().engineQueuedPrefillBlocks).toBe(64)
  })
})
