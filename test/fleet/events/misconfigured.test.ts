// An exact view set up wrong says so: engines of another block size, a publisher that is not
// there, or something else on its port. Simulated vLLM workers publishing on real ZeroMQ
// sockets, the router in front of them, its log lines read as written.
import http from 'node:http'
import { pino } from 'pino'
import { afterEach, describe, expect, it } from 'vitest'
import { KvEventSubscriber } from '../../../src/fleet/events/subscriber.js'
import { ProxyServer } from '../../../src/proxy/proxy.js'
import { startSimFleet, type SimFleet } from '../../../src/sim/index.js'
import { freePort } from '../../helpers/ports.js'
import { chat, post, testConfig, until } from '../../proxy/helpers.js'
import { RecordingTarget, TestPublisher, waitFor } from './helpers.js'

let fleet: SimFleet | undefined
let router: ProxyServer | undefined
let other: http.Server | undefined
afterEach(async () => {
  await router?.close()
  await fleet?.close()
  await new Promise((r) => (other === undefined ? r(undefined) : other.close(r)))
  router = undefined
  fleet = undefined
  other = undefined
})

const MODEL = 'sim-tiny'

interface Publisher {
  endpoint: string
  connected: boolean
  unreachable: string | null
  events: number
}
interface View {
  view: string
  staleReason: string | null
  gpuBlocks: number
  publishers: Publisher[]
  applied: { skipped: Record<string, number> }
}

async function views(r: ProxyServer): Promise<{ id: string; kvEvents: View }[]> {
  const res = await fetch(`${r.adminUrl}/admin/instances`)
  return ((await res.json()) as { endpoints: { instances: { id: string; kvEvents: View }[] }[] }).endpoints[0]!.instances
}

/** A router whose log lines (pino's JSON, as written) land in `lines`. */
async function start(instances: unknown[], overrides: Record<string, unknown>): Promise<{ router: ProxyServer; lines: string[] }> {
  const lines: string[] = []
  const logger = pino({ level: 'info' }, { write: (s: string) => void lines.push(s) })
  const r = await ProxyServer.start(
    testConfig([{ name: 'default', instances }], { routing: { strategy: 'longest_prefix' }, tokenizer: { mode: 'bytes' }, ...overrides, kvEvents: { port: 5557, ...(overrides.kvEvents as object) } }),
    { logger },
  )
  router = r
  return { router: r, lines }
}

const doc = (k: number) => `Document ${k}. ${`A paragraph of its own text for document ${k}, long enough to fill many blocks. `.repeat(40)}`

describe('engines of another block size', () => {
  // vLLM's default 16 against a router told 32, and an engine of 32 against the router's default 16.
  it.each([
    [16, 32],
    [32, 16],
  ])('distrust the view (the approximate estimate routes), with a warning naming the block size they publish (engine %i, router %i)', async (engine, mine) => {
    fleet = await startSimFleet({ instances: 2, profile: 'tiny', blockSize: engine, kvEvents: { port: 0 } })
    const f = fleet
    const { router, lines } = await start(
      f.urls.map((url, i) => ({ url, kvEvents: { endpoint: f.kvEndpoints![i]! } })),
      { routing: { strategy: 'longest_prefix', ...(mine !== 16 && { exactBlockSize: mine }) } },
    )
    await until(async () => (await views(router)).every((i) => i.kvEvents.publishers[0]!.connected), 30_000, 'the subscriptions')
    // Past the router, so that the engine stores blocks and publishes them.
    expect((await post(`${f.urls[0]}/v1/chat/completions`, chat(doc(1), { model: MODEL, max_tokens: 2 }))).status).toBe(200)
    await until(async () => ((await views(router)).find((i) => i.id === f.urls[0])!.kvEvents.applied.skipped.block_size ?? 0) > 0, 30_000, 'the refused blocks')
    const v = (await views(router)).find((i) => i.id === f.urls[0])!.kvEvents
    expect(v.gpuBlocks).toBe(0)
    expect(v.view).toBe('stale')
    expect(v.staleReason).toContain(`the engine's blocks are ${engine} tokens, the router's ${mine}`)
    const warnings = (instance: string) =>
      lines.map((l) => JSON.parse(l) as { level: number; msg: string; instance?: string; observedBlockSize?: number }).filter((l) => l.observedBlockSize !== undefined && l.instance === instance)
    const warned = warnings(f.urls[0]!)
    expect(warned).toHaveLength(1)
    expect(warned[0]!.level).toBe(40)
    expect(warned[0]!.msg).toMatch(new RegExp(`publishes blocks of ${engine} tokens but the router hashes blocks of ${mine}.*--kv-block-size ${engine}`))
    const metrics = await (await fetch(`${router.adminUrl}/metrics`)).text()
    expect(metrics).toMatch(new RegExp(`prefix_router_kv_view_fresh\\{endpoint="default",instance="${f.urls[0]}"\\} 0`))

    // With the view distrusted, the router's own estimate keeps a repeated prompt together.
    const body = chat(doc(2), { model: MODEL, max_tokens: 2 })
    const where: string[] = []
    const cached: number[] = []
    for (let k = 0; k < 4; k++) {
      const r = await post(`${router.url}/v1/chat/completions`, body)
      expect(r.status).toBe(200)
      where.push(r.headers.get('x-sim-instance')!)
      cached.push((JSON.parse(r.text) as { usage: { prompt_tokens_details: { cached_tokens: number } } }).usage.prompt_tokens_details.cached_tokens)
    }
    expect(new Set(where).size).toBe(1)
    expect(cached.slice(1).every((n) => n > 0)).toBe(true)
    // The engines go on publishing in their size: one warning each, not one per batch.
    expect(warnings(f.urls[0]!)).toHaveLength(1)
    expect(warnings(f.urls[1]!).length).toBeLessThanOrEqual(1)
  })
})

describe('a publisher that is not reached', () => {
  it('leaves a view that says it is not connected, not that it waits for a batch', async () => {
    fleet = await startSimFleet({ instances: 1, profile: 'tiny' })
    const nobody = `tcp://127.0.0.1:${await freePort()}`
    const { router } = await start([{ url: fleet.urls[0]!, kvEvents: { endpoint: nobody } }], {})
    const v = (await views(router))[0]!.kvEvents
    expect(v.publishers[0]!.connected).toBe(false)
    expect(v.view).toBe('stale')
    expect(v.staleReason).toBe(`not connected to the publisher at ${nobody} (connecting)`)
  })

  it('is named in a warning within connectWarnMs, and the view says it is not connected rather than waiting for a batch', async () => {
    fleet = await startSimFleet({ instances: 1, profile: 'tiny' })
    const nobody = `tcp://127.0.0.1:${await freePort()}`
    const { router, lines } = await start([{ url: fleet.urls[0]!, kvEvents: { endpoint: nobody } }], { kvEvents: { connectWarnMs: 200 } })
    const first = (await views(router))[0]!.kvEvents
    expect(first.publishers[0]!.connected).toBe(false)
    expect(first.staleReason).not.toMatch(/waiting for the first event batch/)
    expect(first.staleReason).toContain(`not connected to the publisher at ${nobody}`)
    await until(() => lines.some((l) => l.includes('is not reached')), 30_000, 'the warning')
    const warn = JSON.parse(lines.find((l) => l.includes('is not reached'))!) as { level: number; msg: string; publisher: string }
    expect(warn.level).toBe(40)
    expect(warn.publisher).toBe(nobody)
    expect(warn.msg).toContain(`publisher at ${nobody} is not reached after 200 ms: the connection failed`)
    expect(warn.msg).toMatch(/--kv-events-port/)
    const v = (await views(router))[0]!.kvEvents
    expect(v.view).toBe('stale')
    expect(v.publishers[0]!.unreachable).toMatch(/the connection failed \d+ time/)
    expect(v.staleReason).toContain(`not connected to the publisher at ${nobody}: the connection failed`)
  })

  it('something else on the port (an HTTP server) is told apart, and its connections do not flood the log', async () => {
    fleet = await startSimFleet({ instances: 1, profile: 'tiny' })
    // Accepts TCP and answers no ZeroMQ handshake: ZeroMQ connects and drops, again and again.
    other = http.createServer((_req, res) => res.end())
    await new Promise<void>((r) => other!.listen(0, '127.0.0.1', r))
    const wrong = `tcp://127.0.0.1:${(other.address() as { port: number }).port}`
    const { router, lines } = await start([{ url: fleet.urls[0]!, kvEvents: { endpoint: wrong } }], { kvEvents: { connectWarnMs: 300 } })
    await until(() => lines.some((l) => l.includes('is not reached')), 30_000, 'the warning')
    expect(lines.find((l) => l.includes('is not reached'))).toMatch(/something listens there but is not a ZeroMQ publisher/)
    expect((await views(router))[0]!.kvEvents.publishers[0]!.connected).toBe(false)
    expect(lines.filter((l) => /connected (to|from)/.test(l))).toEqual([])
  })
})

describe('a publisher reached, then lost', () => {
  it('is warned of again when it stays away connectWarnMs, and said to be back', async () => {
    let pub = await TestPublisher.open(false)
    const logs: { level: string; msg: string }[] = []
    const sub = new KvEventSubscriber({ instance: 'engine-a', endpoint: pub.endpoint, target: new RecordingTarget(), connectWarnMs: 150, log: (level, msg) => logs.push({ level, msg }) })
    sub.start()
    try {
      await waitFor(() => sub.status().connected, 'the connection')
      expect(logs).toEqual([{ level: 'info', msg: `kv events: engine-a connected to ${pub.endpoint}` }])
      pub.close()
      await waitFor(() => sub.status().unreachable !== null, 'the warning', 10_000)
      expect(sub.status().connected).toBe(false)
      expect(logs.map((l) => l.level)).toEqual(['info', 'warn', 'warn'])
      expect(logs[1]!.msg).toBe(`kv events: engine-a disconnected from ${pub.endpoint}`)
      expect(logs[2]!.msg).toContain(`publisher at ${pub.endpoint} is not reached after 150 ms: the connection failed`)
      // The engine back on its port: reached again, said once.
      pub = await TestPublisher.open(false, pub)
      await waitFor(() => sub.status().connected, 'the connection again', 10_000)
      expect(sub.status().unreachable).toBeNull()
      expect(logs).toHaveLength(4)
      expect(logs[3]!.msg).toMatch(new RegExp(`^kv events: engine-a connected to ${pub.endpoint} after \\d+ ms$`))
    } finally {
      await sub.close()
      pub.close()
    }
  })
})

describe('KV events without a tokenizer', () => {
  it("use the instances' POST /tokenize: the view routes, and /admin/route answers", async () => {
    fleet = await startSimFleet({ instances: 2, profile: 'tiny', kvEvents: { port: 0 } })
    const f = fleet
    const cfg = testConfig(
      [{ name: 'default', instances: f.urls.map((url, i) => ({ url, kvEvents: { endpoint: f.kvEndpoints![i]! } })) }],
      { routing: { strategy: 'longest_prefix' }, kvEvents: { port: 5557 } },
    )
    expect(cfg.tokenizer).toBeUndefined()
    router = await ProxyServer.start(cfg, { logger: pino({ level: 'silent' }) })
    const r = router
    const body = chat(doc(4), { model: MODEL, max_tokens: 2 })
    expect((await post(`${f.urls[1]}/v1/chat/completions`, body)).status).toBe(200)
    await until(async () => {
      const v = (await views(r)).find((i) => i.id === f.urls[1])!.kvEvents
      return v.view === 'fresh' && v.gpuBlocks > 0
    }, 30_000, 'the blocks in the view')
    expect(r.keying.tokenizerFor(r.endpoint('default')!)?.mode).toBe('remote')
    // The implied tokenizer waits 50 ms for /tokenize, as the default: on a busy machine the
    // first call (a new connection) can miss it and answer 422, so the dry run is asked again.
    let dry: Response | undefined
    await until(async () => {
      dry = await fetch(`${r.adminUrl}/admin/route?endpoint=default&api=chat`, { method: 'POST', body })
      if (dry.status === 422) return false
      expect(dry.status).toBe(200)
      return true
    }, 30_000, 'a tokenized dry run')
    const d = (await dry!.json()) as { blocks: number; instances: { instance: string; blocks: number }[] }
    expect(d.blocks).toBeGreaterThan(0)
    expect(d.instances.find((i) => i.instance === f.urls[1])!.blocks).toBe(d.blocks)
  })
})

describe('KV-event log lines', () => {
  it('name the router endpoint as `endpoint` and the publisher as `publisher`, each once', async () => {
    fleet = await startSimFleet({ instances: 1, profile: 'tiny', kvEvents: { port: 0 } })
    const { lines } = await start([{ url: fleet.urls[0]!, kvEvents: { endpoint: fleet.kvEndpoints![0]! } }], {})
    await until(() => lines.some((l) => l.includes('connected to')), 30_000, 'the connection line')
    const line = lines.find((l) => l.includes('connected to'))!
    expect(line.match(/"endpoint":/g)).toHaveLength(1)
    expect(JSON.parse(line)).toMatchObject({ endpoint: 'default', publisher: fleet.kvEndpoints![0]!, instance: fleet.urls[0]! })
  })
})
