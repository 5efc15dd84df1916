// serve with both sources of load beyond its own leases: the engines' (scraped) and the other
// replicas' queued prefill (share-load, through Redis). Each lands in the router, neither
// overwrites the other.
import { afterAll, afterEach, beforeAll, describe, expect, it } from 'vitest'
import { ProxyServer } from '../../../src/proxy/proxy.js'
import { startSimFleet, type SimFleet } from '../../../src/sim/index.js'
import { chat, post, testConfig, until } from '../../proxy/helpers.js'
import { startRedis, type RedisServer } from '../share/redis-server.js'

let redis: RedisServer
let fleet: SimFleet
const servers: ProxyServer[] = []

beforeAll(async () => {
  redis = await startRedis()
  // Each request waits 4 s (simulated) before its engine starts it: its prefill stays queued
  // at the router that sent it.
  fleet = await startSimFleet({ instances: 2, profile: 'tiny', faults: { delayMs: 4000 } })
})
afterAll(async () => {
  await fleet?.close()
  await redis?.stop()
})
afterEach(async () => {
  await Promise.all(servers.splice(0).map((s) => s.close()))
})

async function replica(id: string): Promise<ProxyServer> {
  const config = testConfig([{ name: 'default', instances: fleet.urls }], {
    log: { level: 'silent' },
    routing: { strategy: 'longest_prefix' },
    shareLoad: { url: redis.url, intervalMs: 10 },
    engineLoad: { mode: 'auto', intervalMs: 20 },
    replicaId: id,
  })
  const p = await ProxyServer.start(config)
  servers.push(p)
  return p
}

describe('serve with engine load and share-load', () => {
  it("puts the other replica's queued prefill in the router beside the engines' figure", async () => {
    const a = await replica('router-a')
    const b = await replica('router-b')
    await until(() => a.shareLoad!.peerCount() === 1 && b.shareLoad!.peerCount() === 1, 10_000, 'A and B to hear each other')
    const model = ((await (await fetch(`${fleet.urls[0]}/v1/models`)).json()) as { data: { id: string }[] }).data[0]!.id
    const answer = post(`${a.url}/v1/chat/completions`, chat(`Document: ${'words of its own, '.repeat(200)}`, { model, max_tokens: 1 }))
    const rows = (p: ProxyServer) => p.endpoint('default')!.router.instances()
    await until(() => rows(a).some((i) => i.queuedPrefillBlocks > 0), 5000, 'A to hold queued prefill')
    const at = rows(a).find((i) => i.queuedPrefillBlocks > 0)!
    await until(() => rows(b).find((i) => i.id === at.id)!.engineQueuedPrefillBlocks === at.queuedPrefillBlocks, 5000, "A's figure in B's router")
    // B's scraper reads the engines all the while; its writes keep the shared figure.
    const scrapes = b.endpoint('default')!.load!.status(at.id)!.scrapes.ok
    await until(() => b.endpoint('default')!.load!.status(at.id)!.scrapes.ok >= scrapes + 3, 10_000, 'more scrapes by B')
    expect(rows(b).find((i) => i.id === at.id)!.engineQueuedPrefillBlocks).toBe(at.queuedPrefillBlocks)
    expect((await answer).status).toBe(200)
    await until(() => rows(b).every((i) => i.engineQueuedPrefillBlocks === 0), 10_000, "A's figure gone once its request has its first token")
  })
})
