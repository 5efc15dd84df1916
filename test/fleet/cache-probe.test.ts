// The periodic cache probe of /metrics (hit ratio, cache size): read line by line as the page
// arrives, no further than the counters it wants, and never past METRICS_PROBE_MAX_BYTES. A
// 400 MiB page was read whole into one string; here the server counts what it got to send.
import http from 'node:http'
import type { AddressInfo } from 'node:net'
import { Writable } from 'node:stream'
import { pino } from 'pino'
import { afterEach, describe, expect, it } from 'vitest'
import { CacheMetricsReader, MAX_LINE, METRICS_PROBE_MAX_BYTES } from '../../src/fleet/cache-metrics.js'
import { Instance } from '../../src/fleet/instance.js'
import { MODELS_PROBE_MAX_BYTES, probeModels } from '../../src/fleet/probe.js'
import { ProxyServer } from '../../src/proxy/proxy.js'
import { renderMetrics, RealClock, resolveSim, SimEngine } from '../../src/sim/index.js'
import { closeRouter, testConfig, until } from '../proxy/helpers.js'

const COUNTERS =
  '# HELP vllm:prefix_cache_queries_total x\n# TYPE vllm:prefix_cache_queries_total counter\n' +
  'vllm:prefix_cache_queries_total{engine="0"} 60.0\nvllm:prefix_cache_queries_total{engine="1"} 40.0\n' +
  'vllm:prefix_cache_hits_total{engine="0"} 20.0\nvllm:prefix_cache_hits_total{engine="1"} 5.0\nvllm:prefix_cache_hits_created{engine="0"} 1.7e9\n' +
  'vllm:cache_config_info{block_size="16",num_gpu_blocks="2048"} 1.0\n'

function feedAll(text: string, size: number): { r: CacheMetricsReader; doneAt: number | undefined } {
  const buf = Buffer.from(text)
  const r = new CacheMetricsReader()
  let doneAt: number | undefined
  for (let i = 0; i < buf.length && doneAt === undefined; i += size) if (r.feed(buf.subarray(i, i + size))) doneAt = i + size
  return { r, doneAt }
}

describe('CacheMetricsReader', () => {
  it('reads the counters in any chunking, and says it is done once their groups and the configuration are in', () => {
    const page = `${COUNTERS}# HELP other x\nother 1\n${'# filler\n'.repeat(1000)}`
    for (const size of [1, 3, 7, 64, 4096, 1 << 20]) {
      const { r, doneAt } = feedAll(page, size)
      expect(r.result(), `chunks of ${size}`).toEqual({ hits: 25, queries: 100, blocks: 2048, blockSize: 16 })
      expect(doneAt, `chunks of ${size}`).toBeLessThanOrEqual(COUNTERS.length + size)
    }
  })

  it("reads the simulator's page, the old counter names, and skips a line longer than MAX_LINE", () => {
    const engine = new SimEngine('e', new RealClock(), resolveSim({ profile: 'tiny' }).engine)
    const sim = feedAll(renderMetrics(engine, { modelName: 'sim-tiny' }), 1000).r.result()
    expect(sim.queries).toBe(0)
    expect(sim.blockSize).toBeGreaterThan(0)
    const old = feedAll(`vllm:gpu_prefix_cache_hits_total 3\nvllm:gpu_prefix_cache_queries_total 4\n`, 5).r.result()
    expect(old).toMatchObject({ hits: 3, queries: 4 })
    const long = feedAll(`vllm:prefix_cache_hits_total{x="${'y'.repeat(MAX_LINE + 10)}"} 99\nvllm:prefix_cache_hits_total 2\nvllm:prefix_cache_queries_total 8\n`, 4096).r.result()
    expect(long).toMatchObject({ hits: 2, queries: 8 })
  })
})

/** An instance whose /metrics is `head` then `fillerBytes` of comment lines, written as the client takes them. */
async function hugeMetrics(head: string, fillerBytes: number) {
  const written: number[] = []
  const server = http.createServer((req, res) => {
    if (req.url !== '/metrics') {
      res.writeHead(req.url === '/health' ? 200 : 404)
      return res.end()
    }
    res.writeHead(200, { 'content-type': 'text/plain' })
    const filler = Buffer.from('# a very long page, line after line of it\n'.repeat(1500))
    let sent = head.length
    res.once('close', () => written.push(sent))
    res.write(head)
    const pump = () => {
      while (sent < fillerBytes && !res.destroyed) {
        sent += filler.length
        if (!res.write(filler)) return void res.once('drain', pump)
      }
      if (!res.destroyed) res.end()
    }
    pump()
  })
  await new Promise<void>((r) => server.listen(0, '127.0.0.1', r))
  const url = `http://127.0.0.1:${(server.address() as AddressInfo).port}`
  return { url, written, close: () => new Promise<void>((r) => (server.closeAllConnections(), server.close(() => r()))) }
}

let router: ProxyServer | undefined
const servers: { close(): Promise<void> }[] = []
afterEach(async () => {
  await closeRouter(router, 5000)
  await Promise.all(servers.splice(0).map((s) => s.close()))
  router = undefined
})

describe('the metrics probe', () => {
  it(`reads a 400 MiB page only to its counters, and one without them only to ${METRICS_PROBE_MAX_BYTES} bytes (counted, said once)`, async () => {
    const good = await hugeMetrics(COUNTERS, 400 << 20)
    const bad = await hugeMetrics('vllm:num_requests_running 1\n', 400 << 20)
    servers.push(good, bad)
    const lines: { msg: string; instance?: string; level: number }[] = []
    const log = pino({ level: 'info' }, new Writable({ write: (c: Buffer, _e, cb) => (c.toString().split('\n').filter(Boolean).forEach((l) => lines.push(JSON.parse(l))), cb()) }))
    router = await ProxyServer.start(testConfig([{ name: 'default', instances: [good.url, bad.url] }], { discovery: { modelsIntervalMs: 0, metricsIntervalMs: 50 } }), { logger: log })
    const row = async (url: string) => {
      const r = (await (await fetch(`${router!.adminUrl}/admin/instances`)).json()) as { endpoints: { instances: { id: string; kvCacheHitRatio: number | null; kvCacheBlocks: number | null; metricsPagesCut: number }[] }[] }
      return r.endpoints[0]!.instances.find((i) => i.id === url)!
    }
    await until(async () => (await row(good.url)).kvCacheHitRatio !== null && good.written.length >= 2, 30_000, "the good page's counters")
    expect(await row(good.url)).toMatchObject({ kvCacheHitRatio: 0.25, kvCacheBlocks: 2048, metricsPagesCut: 0 })
    await until(async () => (await row(bad.url)).metricsPagesCut >= 2 && bad.written.length >= 2, 30_000, 'two cut pages')
    // What each answer got into the socket before the probe closed it: what was read, plus the kernel's buffers.
    for (const w of good.written) expect(w).toBeLessThan(32 << 20)
    for (const w of bad.written) expect(w).toBeLessThan(METRICS_PROBE_MAX_BYTES + (32 << 20))
    const said = lines.filter((l) => /metrics probe: its \/metrics goes on past/.test(l.msg))
    expect(said).toHaveLength(1)
    expect(said[0]).toMatchObject({ instance: bad.url, level: 40 })
  })
})

describe('the models probe', () => {
  it(`reads GET /v1/models to ${MODELS_PROBE_MAX_BYTES} bytes at most, and says so`, async () => {
    const adapters = (n: number) => JSON.stringify({ object: 'list', data: Array.from({ length: n }, (_, i) => ({ id: `adapter-${i}-${'x'.repeat(100)}`, parent: 'base' })) })
    let body = adapters(3)
    const server = http.createServer((_req, res) => res.writeHead(200, { 'content-type': 'application/json' }).end(body))
    await new Promise<void>((r) => server.listen(0, '127.0.0.1', r))
    servers.push({ close: () => new Promise<void>((r) => (server.closeAllConnections(), server.close(() => r()))) })
    const inst = new Instance(`http://127.0.0.1:${(server.address() as AddressInfo).port}`, 1, [], testConfig([{ name: 'default', instances: ['http://127.0.0.1:1'] }]).upstream)
    try {
      expect(await probeModels(inst, 5000)).toMatchObject({ ids: [expect.stringMatching(/^adapter-0/), expect.any(String), expect.any(String)] })
      body = adapters(40_000)
      expect(body.length).toBeGreaterThan(MODELS_PROBE_MAX_BYTES)
      expect(await probeModels(inst, 5000)).toEqual({ error: `model discovery (GET /v1/models) answered more than ${MODELS_PROBE_MAX_BYTES} bytes; not read` })
    } finally {
      await inst.close()
    }
  })
})
