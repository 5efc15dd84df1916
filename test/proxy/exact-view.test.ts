// The exact cache view end to end over loopback: simulated vLLM workers publishing their KV
// events on ZeroMQ, the router subscribed to them and tokenizing through the workers'
// POST /tokenize. A prompt an instance holds because a client sent it there directly, past
// the router, is routed to that instance.
import { afterEach, describe, expect, it } from 'vitest'
import type { ProxyServer } from '../../src/proxy/proxy.js'
import { startSimFleet, type SimFleet } from '../../src/sim/index.js'
import { chat, closeRouter, post, startRouter, testConfig, until } from './helpers.js'

let fleet: SimFleet | undefined
let router: ProxyServer | undefined
afterEach(async () => {
  await closeRouter(router, 30_000)
  await fleet?.close()
  router = undefined
  fleet = undefined
})

const MODEL = 'sim-tiny'

function routerConfig(f: SimFleet, tokenizer: Record<string, unknown>, routing: Record<string, unknown> = {}) {
  const instances = f.urls.map((url, i) => ({ url, kvEvents: { endpoint: f.kvEndpoints![i]!, replayEndpoint: f.kvReplayEndpoints![i]! } }))
  return {
    endpoints: [{ name: 'default', instances }],
    routing: { strategy: 'longest_prefix', ...routing },
    kvEvents: { port: 5557 },
    tokenizer,
    debugHeaders: true,
  }
}

async function setup(n: number, tokenizer: Record<string, unknown> = { mode: 'remote', timeoutMs: 5000 }) {
  fleet = await startSimFleet({ instances: n, profile: 'tiny', kvEvents: { port: 0, replayPort: 0 } })
  const f = fleet
  router = await startRouter([], routerConfig(f, tokenizer))
  return { fleet: f, router }
}

interface InstanceReport {
  id: string
  kvEvents: { view: string; gpuBlocks: number; publishers: { seq: string | null; connected: boolean }[] } | null
}

async function report(r: ProxyServer): Promise<InstanceReport[]> {
  const res = await fetch(`${r.adminUrl}/admin/instances`)
  const body = (await res.json()) as { endpoints: { instances: InstanceReport[] }[] }
  return body.endpoints[0]!.instances
}

const doc = (k: number) => `Document ${k}. ${`A paragraph of its own text for document ${k}, long enough to fill many blocks. `.repeat(40)}`

describe('the exact view from the instances\' KV events', () => {
  it('routes a prompt to the instance that holds it, though the router never sent it there', async () => {
    const { fleet, router } = await setup(4)
    await until(async () => (await report(router)).every((i) => i.kvEvents?.publishers[0]?.connected === true), 30_000, 'subscribers connected')
    for (let k = 0; k < 4; k++) {
      const body = chat(doc(k), { model: MODEL, max_tokens: 2 })
      // Past the router: straight to instance k.
      const direct = await post(`${fleet.urls[k]}/v1/chat/completions`, body)
      expect(direct.status).toBe(200)
      const id = fleet.urls[k]!
      await until(async () => {
        const mine = (await report(router)).find((i) => i.id === id)!
        return mine.kvEvents!.view === 'fresh' && mine.kvEvents!.gpuBlocks > 0
      }, 30_000, `instance ${k}'s blocks in the view`)
      const routed = await post(`${router.url}/v1/chat/completions`, body)
      expect(routed.status).toBe(200)
      expect(routed.headers.get('x-sim-instance'), `document ${k}`).toBe(`sim-${k}`)
    }
  })

  it('/admin/route says how many of a body\'s blocks each instance holds; /admin/instances its sequence and blocks', async () => {
    const { fleet, router } = await setup(2)
    const body = chat(doc(7), { model: MODEL, max_tokens: 2 })
    expect((await post(`${fleet.urls[1]}/v1/chat/completions`, body)).status).toBe(200)
    const id = fleet.urls[1]!
    await until(async () => ((await report(router)).find((i) => i.id === id)!.kvEvents?.gpuBlocks ?? 0) > 0, 30_000, 'blocks in the view')
    const tokens = (await (await fetch(`${fleet.urls[1]}/tokenize`, { method: 'POST', body: JSON.stringify({ model: MODEL, messages: JSON.parse(body).messages }) })).json()) as { count: number }
    const res = await fetch(`${router.adminUrl}/admin/route?endpoint=default&api=chat`, { method: 'POST', body })
    expect(res.status).toBe(200)
    const dry = (await res.json()) as { tokens: number; blockSize: number; blocks: number; instances: { instance: string; blocks: number; view: string }[] }
    expect(dry.tokens).toBe(tokens.count)
    expect(dry.blocks).toBe(Math.floor(tokens.count / dry.blockSize))
    const held = Object.fromEntries(dry.instances.map((i) => [i.instance, i.blocks]))
    // The whole prompt's full blocks are cached where it was sent, none elsewhere.
    expect(held[fleet.urls[1]!]).toBe(dry.blocks)
    expect(held[fleet.urls[0]!] ?? 0).toBe(0)
    const inst = (await report(router)).find((i) => i.id === id)!
    expect(inst.kvEvents!.view).toBe('fresh')
    expect(Number(inst.kvEvents!.publishers[0]!.seq)).toBeGreaterThanOrEqual(0)
    // Bad input to the dry run: clear errors.
    const bad = await fetch(`${router.adminUrl}/admin/route?endpoint=nope`, { method: 'POST', body })
    expect(bad.status).toBe(404)
    const notJson = await fetch(`${router.adminUrl}/admin/route?endpoint=default`, { method: 'POST', body: '{' })
    expect(notJson.status).toBe(400)
    expect(((await notJson.json()) as { error: { code: string } }).error.code).toBe('invalid_json')
  })

  it('the local tokenizer (the simulator\'s bytes) routes by the view without a round trip', async () => {
    // The simulator's own tokenizer, in process.
    const { fleet, router } = await setup(2, { mode: 'bytes' })
    const body = chat(doc(3), { model: MODEL, max_tokens: 2 })
    expect((await post(`${fleet.urls[0]}/v1/chat/completions`, body)).status).toBe(200)
    const id = fleet.urls[0]!
    await until(async () => ((await report(router)).find((i) => i.id === id)!.kvEvents?.gpuBlocks ?? 0) > 0, 30_000, 'blocks in the view')
    const routed = await post(`${router.url}/v1/chat/completions`, body)
    expect(routed.headers.get('x-sim-instance')).toBe('sim-0')
    const metrics = await (await fetch(`${router.adminUrl}/metrics`)).text()
    expect(metrics).toMatch(/prefix_router_tokenize_seconds_count\{result="ok"\} [1-9]/)
    expect(metrics).toMatch(/prefix_router_kv_view_fresh\{endpoint="default",instance="[^"]+"\} 1/)
  })

  it('a reload that changes the block size starts the views over: the old hashes would never match', async () => {
    const { fleet, router } = await setup(1, { mode: 'bytes' })
    const body = chat(doc(5), { model: MODEL, max_tokens: 2 })
    expect((await post(`${fleet.urls[0]}/v1/chat/completions`, body)).status).toBe(200)
    const id = fleet.urls[0]!
    await until(async () => ((await report(router)).find((i) => i.id === id)!.kvEvents?.gpuBlocks ?? 0) > 0, 30_000, 'blocks in the view')
    // The same settings again: the view stays.
    router.reload(testConfig(routerConfig(fleet, { mode: 'bytes' }).endpoints, { ...routerConfig(fleet, { mode: 'bytes' }), log: { level: 'silent' } }))
    expect((await report(router)).find((i) => i.id === id)!.kvEvents!.gpuBlocks).toBeGreaterThan(0)
    router.reload(testConfig(routerConfig(fleet, { mode: 'bytes' }).endpoints, { ...routerConfig(fleet, { mode: 'bytes' }, { exactBlockSize: 32 }), log: { level: 'silent' } }))
    const after = (await report(router)).find((i) => i.id === id)!.kvEvents!
    expect(after.gpuBlocks).toBe(0)
    expect(after.view).toBe('stale')
  })
})
