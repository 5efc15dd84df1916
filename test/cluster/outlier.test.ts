// Outlier detection decided once, in the primary, from every worker's answers: failures
// seen by different workers add up to one run, and the ejection reaches every worker.
import http from 'node:http'
import { mkdtempSync, rmSync, writeFileSync } from 'node:fs'
import { tmpdir } from 'node:os'
import { join } from 'node:path'
import { afterAll, describe, expect, it } from 'vitest'
import { startStub, until, type Stub } from '../proxy/helpers.js'
import { clientsOnDistinctWorkers, holdingStub, metrics, metricSum, serve, untilMetric, clusterFixture } from './helpers.js'

const dir = mkdtempSync(join(tmpdir(), 'pr-cluster-'))
const f = clusterFixture()
afterAll(() => rmSync(dir, { recursive: true, force: true }))

/** Healthy to probes, 500 to every request. */
function failing(): Promise<Stub> {
  return startStub('bad', (req: http.IncomingMessage, res: http.ServerResponse) => {
    res.writeHead(req.url === '/health' ? 200 : req.url === '/v1/chat/completions' ? 500 : 404, { 'content-type': 'application/json' })
    res.end('{}')
  })
}

describe('serve --workers: outlier detection', () => {
  it('four 500s in a row, two through each worker, eject the instance for both', async () => {
    const bad = await failing()
    const good = await holdingStub('good')
    f.stubs = [bad, good]
    const file = join(dir, 'router.yaml')
    writeFileSync(file, `outlier: { consecutive5xx: 4, consecutiveGatewayFailure: 0 }\nendpoints:\n  - name: default\n    instances: [${bad.url}, ${good.url}]\n`)
    f.served = await serve(['--workers', '2', '--config', file])
    const [a, b] = (await clientsOnDistinctWorkers(f.served.url, 2)).map((w) => w.client)
    f.clients.push(a!, b!)
    for (const c of [a!, b!]) expect(JSON.parse((await c.request('GET', '/health')).body)).toMatchObject({ status: 'ok', healthyInstances: 2 })

    // A prompt whose target is the failing instance; the one that finds it is its first 500.
    let prompt = ''
    for (let i = 0; prompt === ''; i++) {
      if (i > 200) throw new Error('no prompt found whose target is the failing instance')
      const r = await a!.chat(`prompt ${i} `.repeat(20))
      if (r.status === 500) prompt = `prompt ${i} `.repeat(20)
      else expect(r.status).toBe(200)
    }
    expect((await a!.chat(prompt)).status).toBe(500)
    expect((await b!.chat(prompt)).status).toBe(500)
    // Three in a row so far, no more than two through either worker: nothing is ejected.
    expect(metricSum(await metrics(f.served.admin), 'prefix_router_ejections_total')).toBe(0)
    expect((await b!.chat(prompt)).status).toBe(500)
    await untilMetric(f.served.admin, 'prefix_router_ejections_total', 1)
    expect(metricSum(await metrics(f.served.admin), 'prefix_router_instance_ejected', `instance="${bad.url}"`)).toBe(1)

    // Each worker has the primary's view of its instances: its /health counts one healthy.
    for (const c of [a!, b!]) await until(async () => JSON.parse((await c.request('GET', '/health')).body).healthyInstances === 1, 50_000, 'one healthy instance in each worker')
    // Both workers now send the prompt to the instance left.
    for (const c of [a!, b!]) {
      const r = await c.chat(prompt)
      expect(r.status).toBe(200)
      expect(r.headers['x-prefix-router-instance']).toBe(good.url)
    }
  })
})
