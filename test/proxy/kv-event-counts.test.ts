// What a publisher sends that the view cannot use is visible where an operator looks: per
// publisher in GET /admin/instances and in prefix_router_kv_events_undecodable_total.
import { afterEach, describe, expect, it } from 'vitest'
import type { ProxyServer } from '../../src/proxy/proxy.js'
import { startSimFleet, type SimFleet } from '../../src/sim/index.js'
import type { BlockStoredEvent } from '../../src/fleet/events/types.js'
import { removed, TestPublisher, waitFor } from '../fleet/events/helpers.js'
import { closeRouter, startRouter } from './helpers.js'

let fleet: SimFleet | undefined
let router: ProxyServer | undefined
let pub: TestPublisher | undefined
afterEach(async () => {
  await closeRouter(router, 30_000)
  await fleet?.close()
  pub?.close()
  router = fleet = pub = undefined
})

interface Publisher {
  batches: number
  undecodable: number
  malformedEvents: number
  unknownEvents: number
  oversized: number
  replayFailures: number
}

async function publisherOf(r: ProxyServer): Promise<Publisher | undefined> {
  const body = (await (await fetch(`${r.adminUrl}/admin/instances`)).json()) as { endpoints: { instances: { kvEvents: { publishers: Publisher[] } | null }[] }[] }
  return body.endpoints[0]!.instances[0]!.kvEvents?.publishers[0]
}

const stored = (o: Partial<BlockStoredEvent>): BlockStoredEvent => ({
  type: 'BlockStored',
  blockHashes: [1n],
  parentBlockHash: null,
  tokenIds: Array.from({ length: 16 }, (_, i) => i),
  blockSize: 16,
  loraId: null,
  medium: 'GPU',
  loraName: null,
  extraKeys: null,
  groupIdx: null,
  ...o,
})

describe('malformed KV events, counted where an operator looks', () => {
  it('/admin/instances and prefix_router_kv_events_undecodable_total count malformed events and bad frames', async () => {
    fleet = await startSimFleet({ instances: 1, profile: 'tiny' })
    pub = await TestPublisher.open(false)
    router = await startRouter([], {
      endpoints: [{ name: 'default', instances: [{ url: fleet.urls[0]!, kvEvents: { endpoint: pub.endpoint } }] }],
      routing: { strategy: 'longest_prefix' },
      kvEvents: { port: 5557 },
      tokenizer: { mode: 'bytes' },
    })
    const p = pub
    await waitFor(() => p.subscriptions > 0, 'the router to subscribe')
    await p.batch(0, [
      stored({ tokenIds: [] }), // no tokens
      stored({ tokenIds: [1, 2, 3] }), // tokens that do not match the blocks
      stored({ blockSize: 0, tokenIds: [] }),
      stored({ tokenIds: [-1, ...Array.from({ length: 15 }, () => 0)] }), // a negative id
      stored({ tokenIds: [2 ** 32, ...Array.from({ length: 15 }, () => 0)] }), // past uint32: would wrap
      removed(9),
    ])
    await p.raw(['', Buffer.alloc(3), Buffer.from([0x90])]) // a bad sequence frame
    const r = router
    let st: Publisher | undefined
    for (let i = 0; i < 400; i++) {
      st = await publisherOf(r)
      if (st !== undefined && st.batches === 1 && st.undecodable === 1) break
      await new Promise((res) => setTimeout(res, 10))
    }
    expect(st).toMatchObject({ batches: 1, undecodable: 1, malformedEvents: 5, unknownEvents: 0, oversized: 0, replayFailures: 0 })
    const metrics = await (await fetch(`${r.adminUrl}/metrics`)).text()
    expect(metrics).toMatch(/prefix_router_kv_events_undecodable_total\{endpoint="default",instance="[^"]+"\} 6\b/)
  })
})
