// A router that joins engines already holding a cache (a replica started late, or restarted)
// rebuilds its view from their replay buffers: the simulator's real publisher on loopback, the
// router in this process, and not one request through it. With the buffer reaching back to the
// engine's first batch the view is the whole cache; with a short buffer it is the documented
// subset (what the buffered batches stored), fresh, and reported as rebuilt from its first batch.
import { afterEach, describe, expect, it } from 'vitest'
import type { ProxyServer } from '../../../src/proxy/proxy.js'
import { startSimFleet, type SimFleet } from '../../../src/sim/index.js'
import { chat, post, startRouter, until } from '../../proxy/helpers.js'

let fleet: SimFleet | undefined
let router: ProxyServer | undefined
afterEach(async () => {
  await router?.close()
  await fleet?.close()
  router = undefined
  fleet = undefined
})

const MODEL = 'sim-tiny'
const doc = (k: number) => `Document ${k}. ${`Its own paragraph for document ${k}, long enough for many blocks. `.repeat(30)}`
const body = (k: number) => chat(doc(k), { model: MODEL, max_tokens: 2 })

interface Publisher {
  seq: string | null
  rebuiltFrom: string | null
  rebuilds: number
}
interface Reported {
  id: string
  kvEvents: { view: string; staleReason: string | null; gpuBlocks: number; publishers: Publisher[] }
}

async function instances(r: ProxyServer): Promise<Reported[]> {
  const b = (await (await fetch(`${r.adminUrl}/admin/instances`)).json()) as { endpoints: { instances: Reported[] }[] }
  return b.endpoints[0]!.instances
}

/** Blocks of document k's prompt each instance holds, by the dry run, and how many full blocks the prompt has. */
async function held(r: ProxyServer, k: number): Promise<{ blocks: number; by: Record<string, number> }> {
  const res = await fetch(`${r.adminUrl}/admin/route?endpoint=default&api=chat`, { method: 'POST', body: body(k) })
  expect(res.status).toBe(200)
  const d = (await res.json()) as { blocks: number; instances: { instance: string; blocks: number }[] }
  return { blocks: d.blocks, by: Object.fromEntries(d.instances.map((i) => [i.instance, i.blocks])) }
}

async function join(f: SimFleet, topic = ''): Promise<ProxyServer> {
  const inst = f.urls.map((url, i) => ({ url, kvEvents: { endpoint: f.kvEndpoints![i]!, replayEndpoint: f.kvReplayEndpoints![i]! } }))
  return startRouter([], {
    endpoints: [{ name: 'default', instances: inst }],
    routing: { strategy: 'longest_prefix' },
    kvEvents: { port: 5557, topic },
    tokenizer: { mode: 'bytes' },
  })
}

describe('a router joining engines that already hold a cache', () => {
  // vLLM 0.26.0 and later answer replays with the topic frame (the simulator's default), older vLLM without.
  for (const [replayFraming, topic] of [['topic', ''], ['topic', 'kv@sim'], ['legacy', ''], ['legacy', 'kv@sim']] as const) {
    it(`rebuilds every instance's whole view from the replay buffers, without a request (replay framing ${replayFraming}, topic ${JSON.stringify(topic)})`, async () => {
      fleet = await startSimFleet({ instances: 2, profile: 'tiny', kvEvents: { port: 0, replayPort: 0, replayFraming, topic } })
      // Documents 0-5 cached past any router: even ones on instance 0, odd ones on 1.
      for (let k = 0; k < 6; k++) expect((await post(`${fleet.urls[k % 2]}/v1/chat/completions`, body(k))).status).toBe(200)
      const f = fleet
      router = await join(f, topic)
      const r = router
      await until(async () => (await instances(r)).every((i) => i.kvEvents.publishers[0]!.rebuiltFrom !== null), 30_000, 'both views rebuilt')
      for (const [i, inst] of (await instances(r)).entries()) {
        const engine = f.workers[i]!.engine
        expect(inst.kvEvents.view).toBe('fresh')
        expect(inst.kvEvents.publishers[0]).toMatchObject({ rebuiltFrom: '0', rebuilds: 1, seq: String(f.workers[i]!.kvPublisher!.nextSeq - 1) })
        expect(inst.kvEvents.gpuBlocks).toBe(engine.cache.cachedBlocks)
        expect(inst.kvEvents.gpuBlocks).toBeGreaterThan(0)
      }
      for (let k = 0; k < 6; k++) {
        const h = await held(r, k)
        expect(h.by[f.urls[k % 2]!], `document ${k} where it was sent`).toBe(h.blocks)
        expect(h.by[f.urls[1 - (k % 2)]!] ?? 0, `document ${k} elsewhere`).toBe(0)
      }
      const metrics = await (await fetch(`${r.adminUrl}/metrics`)).text()
      expect(metrics).toMatch(/prefix_router_kv_view_rebuilds_total\{endpoint="default",instance="[^"]+",complete="true"\} 1/)
    })
  }

  it('with a buffer too short to reach back to 0, the view is what the buffered batches stored, reported as such', async () => {
    const bufferSteps = 3
    fleet = await startSimFleet({ instances: 1, profile: 'tiny', kvEvents: { port: 0, replayPort: 0, bufferSteps } })
    const n = 8
    for (let k = 0; k < n; k++) expect((await post(`${fleet.urls[0]}/v1/chat/completions`, body(k))).status).toBe(200)
    const f = fleet
    const pub = f.workers[0]!.kvPublisher!
    expect(pub.nextSeq).toBeGreaterThan(bufferSteps) // the buffer has let batches go
    router = await join(f)
    const r = router
    await until(async () => (await instances(r))[0]!.kvEvents.publishers[0]!.rebuiltFrom !== null, 30_000, 'the view rebuilt')
    const inst = (await instances(r))[0]!
    // Fresh, but said to be rebuilt from the first batch the buffer still held.
    expect(inst.kvEvents.view).toBe('fresh')
    expect(inst.kvEvents.publishers[0]).toMatchObject({ rebuiltFrom: String(pub.nextSeq - bufferSteps), rebuilds: 1 })
    expect(inst.kvEvents.gpuBlocks).toBeGreaterThan(0)
    expect(inst.kvEvents.gpuBlocks).toBeLessThan(f.workers[0]!.engine.cache.cachedBlocks)
    // A subset: each document is held whole (its store is in the buffer) or not at all (stored
    // before the buffer began, or under a parent stored before it: refused as an orphan),
    // never in part; the newest is whole, the oldest unknown.
    const counts: number[] = []
    for (let k = 0; k < n; k++) {
      const h = await held(r, k)
      const b = h.by[f.urls[0]!] ?? 0
      expect([0, h.blocks], `document ${k}`).toContain(b)
      counts.push(b)
    }
    expect(counts.at(-1)).toBeGreaterThan(0)
    expect(counts[0]).toBe(0)
    const metrics = await (await fetch(`${r.adminUrl}/metrics`)).text()
    expect(metrics).toMatch(/prefix_router_kv_view_rebuilds_total\{endpoint="default",instance="[^"]+",complete="false"\} 1/)
  })

  it('without a replay endpoint the view joins the live stream as before: empty, and distrusted', async () => {
    fleet = await startSimFleet({ instances: 1, profile: 'tiny', kvEvents: { port: 0 } })
    expect((await post(`${fleet.urls[0]}/v1/chat/completions`, body(0))).status).toBe(200)
    const f = fleet
    router = await startRouter([], {
      endpoints: [{ name: 'default', instances: [{ url: f.urls[0]!, kvEvents: { endpoint: f.kvEndpoints![0]! } }] }],
      routing: { strategy: 'longest_prefix' },
      kvEvents: { port: 5557, resyncMs: 60_000 },
      tokenizer: { mode: 'bytes' },
    })
    const r = router
    await until(async () => (await instances(r))[0]!.kvEvents.publishers[0]!.seq === null && f.workers[0]!.kvPublisher!.subscribers > 0, 30_000, 'subscribed')
    expect((await post(`${f.urls[0]}/v1/chat/completions`, body(1))).status).toBe(200)
    await until(async () => (await instances(r))[0]!.kvEvents.publishers[0]!.seq !== null, 30_000, 'a live batch')
    const inst = (await instances(r))[0]!
    expect(inst.kvEvents.view).toBe('stale')
    expect(inst.kvEvents.staleReason).toMatch(/joined the event stream at sequence/)
    expect(inst.kvEvents.publishers[0]!.rebuiltFrom).toBeNull()
    expect((await held(r, 0)).by[f.urls[0]!] ?? 0).toBe(0)
  })
})
