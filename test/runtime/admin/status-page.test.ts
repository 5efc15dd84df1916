// The admin port's status page (GET /) in a real browser: Debian's headless Chromium, driven
// over the DevTools protocol, loads it from a router in front of simulator workers that
// publish their KV events, with a second replica sharing load through a real redis-server.
// The page lists the instances with their state, the sharing and the last decisions, and
// redraws itself when a worker stops. Set STATUS_PAGE_SCREENSHOT=FILE.png to keep the
// screenshot (docs/img/status-page.png is made so).
import { execFileSync } from 'node:child_process'
import { mkdtempSync, rmSync, writeFileSync } from 'node:fs'
import { tmpdir } from 'node:os'
import { join } from 'node:path'
import { fileURLToPath } from 'node:url'
import { afterAll, beforeAll, describe, expect, it } from 'vitest'
import { DecisionRing } from '../../../src/runtime/admin/decisions.js'
import { newOutcome } from '../../../src/proxy/access-log.js'
import type { ProxyServer } from '../../../src/proxy/proxy.js'
import type { instancesReport } from '../../../src/runtime/admin/admin.js'
import type { StatusReport } from '../../../src/runtime/admin/status-view.js'
import { startSimFleet, type SimFleet } from '../../../src/sim/index.js'
import { Browser, type Page } from '../../helpers/chromium.js'
import { startRedis, type RedisServer } from '../../fleet/share/redis-server.js'
import { chat, closeRouter, post, startRouter, until } from '../../proxy/helpers.js'

const MODEL = 'sim-tiny'

function routerConfig(f: SimFleet, replicaId: string, redis: string) {
  const instances = f.urls.map((url, i) => ({ url, kvEvents: { endpoint: f.kvEndpoints![i]!, replayEndpoint: f.kvReplayEndpoints![i]! } }))
  return {
    endpoints: [{ name: 'default', instances }],
    routing: { strategy: 'longest_prefix' },
    kvEvents: { port: 5557 },
    tokenizer: { mode: 'bytes' },
    // Probes often enough that a stopped worker is seen down within a few of them.
    health: { intervalMs: 200, timeoutMs: 1000 },
    engineLoad: { mode: 'auto', intervalMs: 100 },
    discovery: { modelsIntervalMs: 0, metricsIntervalMs: 200 },
    shareLoad: { url: redis },
    replicaId,
  }
}

type Status = StatusReport<ReturnType<typeof instancesReport>[number]>

async function status(router: ProxyServer): Promise<Status> {
  return (await (await fetch(`${router.adminUrl}/admin/status`)).json()) as Status
}

describe('the decision ring', () => {
  it('keeps the last `capacity` decisions, newest first, and counts them all', () => {
    const ring = new DecisionRing(3)
    expect(ring.recent()).toEqual([])
    for (let k = 0; k < 5; k++) ring.record(Object.assign(newOutcome(`r${k}`, false), { endpoint: 'e', instance: `i${k}`, strategy: 'longest_prefix', decision: 'target', retries: k }), 200 + k, k + 0.25)
    expect(ring.total).toBe(5)
    expect(ring.recent().map((d) => [d.instance, d.status, d.retries, d.ms])).toEqual([
      ['i4', 204, 4, 4.3],
      ['i3', 203, 3, 3.3],
      ['i2', 202, 2, 2.3],
    ])
    // A request the router answered itself: no instance, no decision.
    ring.record(Object.assign(newOutcome('x', false), { endpoint: 'e', strategy: 'random' }), 503, 1)
    expect(ring.recent()[0]).toMatchObject({ instance: null, decision: null, status: 503, strategy: 'random' })
    expect(() => new DecisionRing(0)).toThrow(RangeError)
  })
})

describe('the status page', () => {
  let fleet: SimFleet
  let redis: RedisServer
  let a: ProxyServer | undefined
  let b: ProxyServer | undefined
  let browser: Browser | undefined
  let page: Page

  beforeAll(async () => {
    redis = await startRedis()
    fleet = await startSimFleet({ instances: 3, profile: 'tiny', kvEvents: { port: 0, replayPort: 0 } })
    a = await startRouter([], { ...routerConfig(fleet, 'replica-a', redis.url) })
    b = await startRouter([], { ...routerConfig(fleet, 'replica-b', redis.url) })
    const r = a
    await until(async () => (await status(r)).endpoints[0]!.instances.every((i) => i.kvEvents?.publishers[0]?.connected === true), 30_000, 'the subscriptions')
    // Some traffic, repeated prompts among it, for the decisions and the hit rates.
    for (let k = 0; k < 12; k++) {
      const res = await post(`${a.url}/v1/chat/completions`, chat(`Document ${k % 5}. ${'Its own sentence, again and again. '.repeat(40)}`, { model: MODEL, max_tokens: 2 }))
      expect(res.status).toBe(200)
    }
    browser = await Browser.launch()
    page = await browser.page()
  }, 60_000)

  afterAll(async () => {
    await browser?.close()
    await closeRouter(a)
    await closeRouter(b)
    await fleet?.close()
    await redis?.stop()
  })

  it('is served with its script and style, under a policy that allows nothing else', async () => {
    for (const [path, type] of [
      ['/', 'text/html'],
      ['/status.js', 'text/javascript'],
      ['/status.css', 'text/css'],
    ] as const) {
      const res = await fetch(`${a!.adminUrl}${path}`)
      expect(res.status, path).toBe(200)
      expect(res.headers.get('content-type')).toContain(type)
      expect(res.headers.get('content-security-policy')).toMatch(/default-src 'none'; script-src 'self'/)
      expect(res.headers.get('x-content-type-options')).toBe('nosniff')
    }
    const missing = await fetch(`${a!.adminUrl}/status.json`)
    expect(missing.status).toBe(404)
    expect(((await missing.json()) as { error: { code: string } }).error.code).toBe('not_found')
  })

  it('lists every instance with its state, the sharing and the decisions; redraws when a worker stops', async () => {
    await page.goto(`${a!.adminUrl}/?refresh=250`)
    const ids = fleet.urls
    await page.waitFor(`${JSON.stringify(ids)}.every((id) => document.querySelector('tr[data-instance="' + id + '"][data-health="up"]'))`)
    const rows = await page.evaluate<{ id: string; cells: string[] }[]>(`[...document.querySelectorAll('tr[data-instance]')].map((tr) => ({ id: tr.dataset.instance, cells: [...tr.cells].map((c) => c.textContent) }))`)
    expect(rows.map((r) => r.id).sort()).toEqual([...ids].sort())
    for (const r of rows) {
      expect(r.cells[1], r.id).toBe('both') // role
      expect(r.cells[2], r.id).toBe('UP')
      expect(r.cells[6], r.id).toMatch(/^(fresh|stale) · \d+ blocks · 1\/1 publishers/) // the exact view
    }
    expect(await page.evaluate<string>(`document.querySelector('section[data-endpoint="default"] h2').textContent`)).toMatch(/Endpoint default longest_prefix · 3 of 3 instances up/)
    // The other replica, heard through Redis.
    await page.waitFor(`document.querySelector('[data-sharing="connected"]') && document.querySelector('tr[data-peer="replica-b"]')`)
    // The 12 requests, newest first, each with the instance that served it and its decision.
    const decisions = await page.evaluate<string[][]>(`[...document.querySelectorAll('#decisions-body tbody tr')].map((tr) => [...tr.cells].map((c) => c.textContent))`)
    expect(decisions).toHaveLength(12)
    for (const d of decisions) {
      expect(ids).toContain(d[2])
      expect(d.slice(3, 6)).toEqual(['longest_prefix', expect.stringMatching(/^(target|overflow)$/), '200'])
    }
    expect(await page.evaluate<string>(`document.getElementById('replica').textContent`)).toMatch(/^replica replica-a · v\d+\.\d+\.\d+ · pid \d+ · up /)

    // One worker stops: the page, polling, marks its row down without being reloaded.
    const victim = fleet.workers[1]!
    await victim.stop()
    await page.waitFor(`document.querySelector('tr[data-instance="${victim.url}"][data-health="down"]')`)
    const down = await page.evaluate<string[]>(`[...document.querySelector('tr[data-instance="${victim.url}"]').cells].map((c) => c.textContent)`)
    expect(down[2]).toBe('DOWN')
    expect(down[10]).not.toBe('') // its last error
    expect(await page.evaluate<string>(`document.querySelector('section[data-endpoint="default"] h2').textContent`)).toMatch(/2 of 3 instances up/)
    // The others stay up.
    for (const id of ids.filter((u) => u !== victim.url)) expect(await page.evaluate<string>(`document.querySelector('tr[data-instance="${id}"]').dataset.health`)).toBe('up')

    const png = await page.screenshot(1400)
    expect(png.subarray(0, 8).toString('hex')).toBe('89504e470d0a1a0a')
    expect(png.readUInt32BE(16)).toBe(1400) // IHDR width
    const keep = process.env.STATUS_PAGE_SCREENSHOT
    const dir = mkdtempSync(join(tmpdir(), 'pr-status-'))
    try {
      writeFileSync(keep ?? join(dir, 'status-page.png'), png)
    } finally {
      rmSync(dir, { recursive: true, force: true })
    }
  })

  it('says when the admin port stops answering, and keeps what it last showed', async () => {
    // The second replica's page, then that replica closes.
    const other = await browser!.page()
    await other.goto(`${b!.adminUrl}/?refresh=250`)
    await other.waitFor(`document.querySelectorAll('tr[data-instance]').length === 3`)
    await closeRouter(b)
    b = undefined
    await other.waitFor(`document.getElementById('state').dataset.state === 'unreachable'`)
    expect(await other.evaluate<string>(`document.getElementById('state').textContent`)).toMatch(/^not updating: /)
    expect(await other.evaluate<number>(`document.querySelectorAll('tr[data-instance]').length`)).toBe(3)
  })

  it('the published package has the page where dist/runtime/admin/status-page.js finds it', () => {
    const root = fileURLToPath(new URL('../../..', import.meta.url))
    const out = execFileSync('npm', ['pack', '--dry-run', '--json', '--ignore-scripts'], { cwd: root, encoding: 'utf8' })
    const packed = new Set((JSON.parse(out) as { files: { path: string }[] }[])[0]!.files.map((f) => f.path))
    for (const f of ['src/runtime/admin/status/index.html', 'src/runtime/admin/status/status.js', 'src/runtime/admin/status/status.css', 'dist/runtime/admin/status-page.js']) expect(packed.has(f), f).toBe(true)
  })
})
