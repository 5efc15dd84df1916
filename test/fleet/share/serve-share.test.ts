// `serve --share-load`: two routers in front of one simulated fleet, each seeing the queued
// prefill the other holds. In process (each ProxyServer with a test double for the sink the
// router's wiring takes), and as an operator runs it (two `serve` processes, one of them with
// --workers 2, read through /admin/replicas and /metrics).
import { spawn, spawnSync, type ChildProcessWithoutNullStreams } from 'node:child_process'
import { fileURLToPath } from 'node:url'
import { afterAll, afterEach, beforeAll, describe, expect, it } from 'vitest'
import { ProxyServer } from '../../../src/proxy/proxy.js'
import type { SharedLoadSink } from '../../../src/fleet/share/index.js'
import type { ShareLoadReport } from '../../../src/fleet/share/share-load.js'
import { startSimFleet, type SimFleet } from '../../../src/sim/index.js'
import { chat, post, testConfig, until } from '../../proxy/helpers.js'
import { startRedis, type RedisServer } from './redis-server.js'

const cli = fileURLToPath(new URL('../../../dist/cli.js', import.meta.url))
let redis: RedisServer
let fleet: SimFleet
/** The model the simulated fleet serves. */
let model = ''

beforeAll(async () => {
  redis = await startRedis()
  // Every request waits 4 s (simulated, at time scale 1) before its engine starts it: its
  // prefill stays queued at the router that sent it for that long.
  fleet = await startSimFleet({ instances: 2, profile: 'tiny', faults: { delayMs: 4000 } })
  model = ((await (await fetch(`${fleet.urls[0]}/v1/models`)).json()) as { data: { id: string }[] }).data[0]!.id
})
afterAll(async () => {
  await fleet?.close()
  await redis?.stop()
})

const body = (k: number) => chat(`Document ${k}: ${'words of its own, '.repeat(200)}`, { model, max_tokens: 1 })

async function replicas(admin: string): Promise<ShareLoadReport> {
  const r = await fetch(`${admin}/admin/replicas`)
  expect(r.status).toBe(200)
  return (await r.json()) as ShareLoadReport
}

async function metric(admin: string, name: string): Promise<number> {
  const text = await (await fetch(`${admin}/metrics`)).text()
  const line = text.split('\n').find((l) => l.startsWith(`${name} `) || l.startsWith(`${name}{`))
  return line === undefined ? NaN : Number(line.split(' ').pop())
}

describe('serve --share-load, in process', () => {
  const servers: ProxyServer[] = []
  afterEach(async () => {
    await Promise.all(servers.splice(0).map((s) => s.close()))
  })

  async function router(id: string, url = redis.url) {
    const seen = new Map<string, number>()
    const sink: SharedLoadSink = { setSharedPrefill: (ep, inst, blocks) => void seen.set(`${ep} ${inst}`, blocks) }
    const config = testConfig([{ name: 'default', instances: fleet.urls }], {
      log: { level: 'silent' },
      routing: { strategy: 'longest_prefix' },
      shareLoad: { url, intervalMs: 10 },
      replicaId: id,
    })
    const p = await ProxyServer.start(config, { shareLoadSink: sink })
    servers.push(p)
    return { p, seen, own: (inst: string) => p.endpoint('default')!.router.instances().find((i) => i.id === inst)!.queuedPrefillBlocks }
  }

  it("gives each router the other's queued prefill, through the sink and in /admin/replicas", async () => {
    const a = await router('router-a')
    const b = await router('router-b')
    await until(() => a.p.shareLoad!.peerCount() === 1 && b.p.shareLoad!.peerCount() === 1, 10_000, 'A and B to hear each other')
    const answers = [post(`${a.p.url}/v1/chat/completions`, body(1)), post(`${b.p.url}/v1/chat/completions`, body(2))]
    const held = (r: typeof a) => fleet.urls.find((u) => r.own(u) > 0)
    await until(() => held(a) !== undefined && held(b) !== undefined, 5000, 'both to hold queued prefill')
    const ia = held(a)!
    const ib = held(b)!
    await until(() => b.seen.get(`default ${ia}`) === a.own(ia) && a.seen.get(`default ${ib}`) === b.own(ib), 5000, "each other's figures in the sinks")
    const rb = await replicas(b.p.adminUrl)
    expect(rb.replica).toBe('router-b')
    expect(rb.connected).toBe(true)
    expect(rb.peers.map((p) => p.replica)).toEqual(['router-a'])
    expect(rb.peers[0]!.prefillBlocks.default![ia]).toBe(a.own(ia))
    expect(rb.sharedPrefillBlocks.default![ia]).toBe(a.own(ia))
    expect(rb.ownPrefillBlocks.default![ib]).toBe(b.own(ib))
    expect(await metric(b.p.adminUrl, 'prefix_router_share_load_peers')).toBe(1)
    expect(await metric(b.p.adminUrl, 'prefix_router_share_load_connected')).toBe(1)
    for (const r of await Promise.all(answers)) expect(r.status).toBe(200)
    // Answered: nothing queued anywhere, and the figures say so.
    await until(() => b.seen.get(`default ${ia}`) === 0 && a.seen.get(`default ${ib}`) === 0, 5000, 'the figures back to 0')
    const text = await (await fetch(`${b.p.adminUrl}/metrics`)).text()
    expect(text).toMatch(/prefix_router_share_load_messages_total\{direction="sent"\} [1-9]/)
    expect(text).toMatch(/prefix_router_share_load_messages_total\{direction="received"\} [1-9]/)
    expect(text).toMatch(/prefix_router_share_load_messages_total\{direction="dropped"\} 0/)
  })

  it('starts and routes with Redis unreachable; /admin/replicas says so', async () => {
    const down = await startRedis()
    await down.kill()
    const a = await router('alone', down.url)
    await until(async () => (await replicas(a.p.adminUrl)).connectionFailures === 1, 5000, 'the failure counted')
    const r = await post(`${a.p.url}/v1/chat/completions`, chat('hello', { model, max_tokens: 1 }))
    expect(r.status).toBe(200)
    expect((await replicas(a.p.adminUrl)).connected).toBe(false)
    expect(await metric(a.p.adminUrl, 'prefix_router_share_load_connected')).toBe(0)
  })

  it('answers 409 on /admin/replicas without --share-load', async () => {
    const p = await ProxyServer.start(testConfig([{ name: 'default', instances: fleet.urls }], { log: { level: 'silent' } }))
    servers.push(p)
    const r = await fetch(`${p.adminUrl}/admin/replicas`)
    expect(r.status).toBe(409)
    expect(((await r.json()) as { error: { code: string } }).error.code).toBe('share_load_off')
  })
})

describe('serve --share-load, as processes', () => {
  const children: ChildProcessWithoutNullStreams[] = []
  afterEach(async () => {
    await Promise.all(
      children.splice(0).map((c) => {
        if (c.exitCode !== null) return undefined
        c.kill('SIGTERM')
        return new Promise((r) => c.once('exit', r))
      }),
    )
  })

  function serve(args: string[]): Promise<{ url: string; admin: string; stderr: () => string }> {
    const c = spawn(process.execPath, [cli, 'serve', '--port', '0', '--admin-port', '0', '--log-level', 'warn', '--drain-delay-ms', '0', '--warmup-requests', '0', '--strategy', 'longest_prefix', ...fleet.urls.flatMap((u) => ['--upstream', u]), ...args])
    children.push(c)
    let err = ''
    return new Promise((resolve, reject) => {
      const timer = setTimeout(() => reject(new Error(`serve did not start:\n${err}`)), 20_000)
      c.stderr.on('data', (d: Buffer) => {
        err += d.toString()
        const m = /on (http:\/\/\S+) \(admin (http:\/\/\S+)\)/.exec(err)
        if (m) {
          clearTimeout(timer)
          resolve({ url: m[1]!, admin: m[2]!, stderr: () => err })
        }
      })
      c.once('exit', (code) => reject(new Error(`serve exited ${code}:\n${err}`)))
    })
  }

  it('shares between two serve processes, one of them with --workers 2 (its primary speaks for it)', async () => {
    const a = await serve(['--share-load', redis.url, '--replica-id', 'proc-a'])
    const b = await serve(['--share-load', redis.url, '--replica-id', 'proc-b', '--workers', '2'])
    expect(b.stderr()).toContain(`sharing queued prefill with the other replicas through ${redis.url} (channel prefix-router:load) as replica proc-b`)
    await until(async () => (await replicas(a.admin)).peers.length === 1 && (await replicas(b.admin)).peers.length === 1, 10_000, 'each to hear the other')
    // Requests through b's workers: b's primary publishes what they queue on the shared state.
    const answers = [post(`${b.url}/v1/chat/completions`, body(3)), post(`${b.url}/v1/chat/completions`, body(4))]
    await until(async () => Object.values((await replicas(a.admin)).sharedPrefillBlocks.default ?? {}).some((n) => n > 0), 5000, "b's queued prefill at a")
    // The two reports are read one after the other, and b publishes again in between when its
    // queue moves: wait until a reads what b last published, rather than comparing one pair of reads.
    let ra = await replicas(a.admin)
    let rb = await replicas(b.admin)
    const published = (r: ShareLoadReport) => Object.fromEntries(Object.entries(r.ownPrefillBlocks.default ?? {}).filter(([, n]) => n > 0))
    await until(
      async () => {
        ;[ra, rb] = [await replicas(a.admin), await replicas(b.admin)]
        const sorted = (o: Record<string, number>) => JSON.stringify(Object.entries(o).sort(([x], [y]) => x.localeCompare(y)))
        return sorted(ra.sharedPrefillBlocks.default ?? {}) === sorted(published(rb))
      },
      5000,
      "a's figure to equal what b publishes",
    )
    expect(ra.peers[0]!.replica).toBe('proc-b')
    expect(ra.sharedPrefillBlocks.default).toEqual(published(rb))
    for (const r of await Promise.all(answers)) expect(r.status).toBe(200)
    expect(await metric(b.admin, 'prefix_router_share_load_peers')).toBe(1)
  })

  it('refuses a malformed --share-load at start, naming the flag and the value', () => {
    const r = spawnSync(process.execPath, [cli, 'serve', '--upstream', 'http://127.0.0.1:1', '--share-load', 'localhost:6379'], { encoding: 'utf8' })
    expect(r.status).toBe(2)
    expect(r.stderr).toMatch(/shareLoad\.url: must start with redis:\/\/ \(or rediss:\/\/ for TLS\); got "localhost:6379" \(from --share-load\)/)
  })
})
