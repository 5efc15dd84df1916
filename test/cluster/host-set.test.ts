// `serve --workers`: what the primary decides of the fleet reaches every worker as host-set
// changes: an instance whose probes fail leaves each worker's rotation and comes back, one
// discovery drops leaves it for good, and a worker that starts late (a replacement for one
// killed) begins from the primary's set as it is, not as it was.
import { mkdtempSync, renameSync, rmSync, writeFileSync } from 'node:fs'
import type http from 'node:http'
import { tmpdir } from 'node:os'
import { join } from 'node:path'
import { afterAll, describe, expect, it } from 'vitest'
import { startStub, until, type Stub } from '../proxy/helpers.js'
import { clientsOnDistinctWorkers, serve, clusterFixture, untilMetric, type Client } from './helpers.js'

const dir = mkdtempSync(join(tmpdir(), 'pr-cluster-hosts-'))
const f = clusterFixture()
afterAll(() => rmSync(dir, { recursive: true, force: true }))

/** A stub whose probes pass while `up` holds; it answers chats with its name. */
async function flipping(name: string): Promise<Stub & { up: boolean }> {
  const s = Object.assign(
    await startStub(name, (req: http.IncomingMessage, res: http.ServerResponse) => {
      if (req.url === '/health') {
        res.writeHead(s.up ? 200 : 503)
        return void res.end()
      }
      if (req.url !== '/v1/chat/completions') {
        res.writeHead(404)
        return void res.end()
      }
      res.writeHead(200, { 'content-type': 'application/json' })
      res.end(JSON.stringify({ stub: name }))
    }),
    { up: true },
  )
  return s
}

/** The instances in rotation a worker's /health counts. */
async function healthy(c: Client): Promise<number> {
  return (JSON.parse((await c.request('GET', '/health')).body) as { healthyInstances: number }).healthyInstances
}

let asked = 0
/** Which stubs answer a worker's chats (new prompts each time: none cached anywhere yet). */
async function answering(c: Client): Promise<string[]> {
  const seen = new Set<string>()
  for (let i = 0; i < 48; i++) {
    const r = await c.chat(`prompt ${asked++} `.repeat(20))
    expect(r.status).toBe(200)
    seen.add((JSON.parse(r.body) as { stub: string }).stub)
  }
  return [...seen].sort()
}

function list(path: string, urls: string[]): void {
  writeFileSync(`${path}.tmp`, urls.map((u) => `- ${u}\n`).join(''))
  renameSync(`${path}.tmp`, path)
}

describe('serve --workers: the host set in every worker', () => {
  it("follows the primary's health flips and removals, and a worker that starts late begins from the set as it is", async () => {
    const stubs = await Promise.all(['a', 'b', 'c'].map(flipping))
    const [a, b, c] = stubs
    f.stubs = stubs
    const hosts = join(dir, 'hosts.yaml')
    list(hosts, stubs.map((s) => s.url))
    const file = join(dir, 'router.yaml')
    writeFileSync(file, `health: { intervalMs: 100, healthyThreshold: 1, unhealthyThreshold: 1 }\nendpoints:\n  - name: default\n    discovery: [{ type: file, path: ${hosts} }]\n`)
    f.served = await serve(['--workers', '2', '--config', file])
    const workers = await clientsOnDistinctWorkers(f.served.url, 2)
    const clients = workers.map((w) => w.client)
    f.clients.push(...clients)
    const every = async (n: number) => {
      for (const w of clients) await until(async () => (await healthy(w)) === n, 50_000, `${n} instances in rotation`)
    }
    await every(3)

    // The primary's probes take c out: each worker leaves it, then takes it back.
    c!.up = false
    await every(2)
    for (const w of clients) expect(await answering(w)).not.toContain('c')
    c!.up = true
    await every(3)
    for (const w of clients) expect(await answering(w)).toContain('c')

    // Discovery drops b: gone from every worker.
    list(hosts, [a!.url, c!.url])
    await every(2)
    for (const w of clients) expect(await answering(w)).not.toContain('b')
    const admin = (await (await fetch(`${f.served.admin}/admin/instances`)).json()) as { endpoints: { instances: { id: string }[] }[] }
    expect(admin.endpoints[0]!.instances.map((i) => i.id).sort()).toEqual([a!.url, c!.url].sort())

    // A worker killed and replaced: the new one reads the set from the primary's record.
    const [killed, kept] = workers.map((w) => w.pid)
    process.kill(Number(killed), 'SIGKILL')
    await untilMetric(f.served.admin, 'prefix_router_worker_restarts_total', 1)
    await untilMetric(f.served.admin, 'prefix_router_workers', 2)
    const now = await clientsOnDistinctWorkers(f.served.url, 2)
    f.clients.push(...now.map((w) => w.client))
    expect(now.map((w) => w.pid)).not.toContain(killed)
    const fresh = now.find((w) => w.pid !== kept)!.client
    expect(await healthy(fresh)).toBe(2)
    expect(await answering(fresh)).not.toContain('b')
  })
})
