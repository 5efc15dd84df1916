// What reading the engines' load costs a router: 16 instances' /metrics, each a body as large
// as a vLLM server's (bench/engine-load/vllm-metrics.ts: vLLM v1's families with their
// histogram buckets, the process and HTTP collectors; about 57 KB), served by 16 loopback
// servers in a child process, scraped by this process as serve does (EngineLoadScraper, each
// instance's probe pool, a Router taking the figures), at 50, 100 and 250 ms. CPU of this
// process (process.cpuUsage) over a window after a warm-up that is discarded, minus the same
// window with nothing scraped, in rounds that alternate the intervals (the median is given).
// Target: under 2% of one core for 16 instances at the default interval.
//
// Run: npm run bench:engine-load   (ROUNDS=3, WINDOW_S=10, WARMUP_S=2, INTERVALS=50,100,250, ENGINES=16, DP_ENGINES=1)
import { PerformanceObserver } from 'node:perf_hooks'
import { ConfigSchema } from '../src/config/config.js'
import { Router } from '../src/core/router.js'
import { Instance } from '../src/fleet/instance.js'
import { instanceUrl } from '../src/fleet/probe.js'
import { ENGINE_LOAD_INTERVAL_MS, EngineLoadScraper, readEngineGauges, STALE_INTERVALS } from '../src/fleet/load/index.js'
import { vllmMetricsBody } from './engine-load/vllm-metrics.js'
import { machine, median, pad, startNodeScript, stopStarted } from './harness.js'

const WINDOW_S = Number(process.env.WINDOW_S ?? 10)
const WARMUP_S = Number(process.env.WARMUP_S ?? 2)
const INTERVALS = (process.env.INTERVALS ?? '50,100,250').split(',').map(Number)
const ENGINES = Number(process.env.ENGINES ?? 16)
const DP_ENGINES = Number(process.env.DP_ENGINES ?? 1)
const TARGET = 0.02
const ROUNDS = Number(process.env.ROUNDS ?? 3)

const sleep = (ms: number) => new Promise((r) => setTimeout(r, ms))
/** Main-thread GC pauses (ms), as node:perf_hooks reports them. */
let gcMs = 0
new PerformanceObserver((list) => {
  for (const e of list.getEntries()) gcMs += e.duration
}).observe({ entryTypes: ['gc'] })

/** Share of one core this process used over `seconds` (user + system), and the system part of it. */
async function cpuSplit(seconds: number): Promise<{ total: number; system: number; gc: number }> {
  const c0 = process.cpuUsage()
  const g0 = gcMs
  const t0 = performance.now()
  await sleep(seconds * 1000)
  const c = process.cpuUsage(c0)
  const ms = performance.now() - t0
  return { total: (c.user + c.system) / 1000 / ms, system: c.system / 1000 / ms, gc: (gcMs - g0) / ms }
}
const cpu = async (seconds: number) => (await cpuSplit(seconds)).total

console.log(`machine: ${machine()}`)
const body = Buffer.from(vllmMetricsBody({ engines: DP_ENGINES }))
const lines = body.toString('latin1').split('\n').length
// The read alone, in process: what the scraper does with the first chunk of an answer (a
// socket read's 64 KiB holds this whole body).
const reads: number[] = []
for (let round = 0; round < 7; round++) {
  const t0 = performance.now()
  for (let i = 0; i < 20_000; i++) readEngineGauges(body, false)
  reads.push(((performance.now() - t0) / 20_000) * 1000)
}
const first = readEngineGauges(body, false)
if (first?.ok !== true) throw new Error(`the fixture does not read: ${JSON.stringify(first)}`)
console.log(`body: ${(body.length / 1024).toFixed(1)} KiB, ${lines} lines, ${DP_ENGINES} engine(s); finding its three gauges: ${median(reads.slice(2))!.toFixed(2)} µs`)

const servers = await startNodeScript(['--import', 'tsx', 'bench/engine-load/servers.ts'], { ENGINES: String(ENGINES), DP_ENGINES: String(DP_ENGINES) })
const ports = /listening ([\d,]+)/.exec(servers.output())![1]!.split(',')
const upstream = ConfigSchema.parse({}).upstream
const instances = ports.map((p) => new Instance(`http://127.0.0.1:${p}`, 1, [], upstream))
const router = new Router({ instances: instances.map((i) => ({ id: i.id })), strategy: 'longest_prefix' })

/** One interval's run: the share of a core over the window, the scrapes in it, those that failed. */
async function run(intervalMs: number): Promise<{ busy: number; system: number; gc: number; scrapes: number; bad: number }> {
  let scrapes = 0
  let bad = 0
  const scraper = new EngineLoadScraper({
    sink: { setEngineLoad: (id, n, p) => router.setEngineLoad(id, n, p), inFlight: (id) => router.inFlight(id) },
    intervalMs,
    staleAfterMs: STALE_INTERVALS * intervalMs,
    onScrape: (_id, result) => {
      scrapes++
      if (result !== 'ok') bad++
    },
  })
  scraper.sync(instances.map((i) => ({ id: i.id, url: instanceUrl(i, '/metrics'), dispatcher: i.probeDispatcher })))
  await sleep(WARMUP_S * 1000)
  const s0 = scrapes
  const b0 = bad
  const { total: busy, system, gc } = await cpuSplit(WINDOW_S)
  const n = scrapes - s0
  await scraper.close()
  return { busy, system, gc, scrapes: n, bad: bad - b0 }
}

const idle: number[] = []
const runs = new Map<number, { busy: number; system: number; gc: number; scrapes: number; bad: number }[]>(INTERVALS.map((i) => [i, []]))
for (let round = 0; round < ROUNDS; round++) {
  idle.push(await cpu(WINDOW_S))
  for (const intervalMs of INTERVALS) runs.get(intervalMs)!.push(await run(intervalMs))
}
const base = median(idle)!
console.log(`\n${ENGINES} instances; CPU of this process over ${WINDOW_S} s windows after ${WARMUP_S} s of warm-up, median of ${ROUNDS} rounds, less ${(base * 100).toFixed(2)}% with nothing scraped (idle: ${idle.map((v) => `${(v * 100).toFixed(2)}%`).join(', ')})`)
console.log(`${pad('interval', 12)}${pad('scrapes/s', 12)}${pad('CPU', 10)}${pad('rounds', 26)}${pad('system', 9)}${pad('GC', 8)}${pad('per scrape', 14)}${pad('failed', 8)}target (< ${TARGET * 100}% at ${ENGINE_LOAD_INTERVAL_MS} ms)`)
for (const [intervalMs, rs] of runs) {
  const nets = rs.map((r) => r.busy - base)
  const net = median(nets)!
  const scrapes = median(rs.map((r) => r.scrapes))!
  const system = median(rs.map((r) => r.system))!
  const gc = median(rs.map((r) => r.gc))!
  const perScrape = (net * WINDOW_S * 1e6) / Math.max(1, scrapes)
  const verdict = intervalMs === ENGINE_LOAD_INTERVAL_MS ? (net < TARGET ? 'PASS' : 'FAIL') : ''
  console.log(
    `${pad(`${intervalMs} ms`, 12)}${pad((scrapes / WINDOW_S).toFixed(0), 12)}${pad(`${(net * 100).toFixed(2)}%`, 10)}${pad(nets.map((v) => `${(v * 100).toFixed(2)}%`).join(', '), 26)}${pad(`${(system * 100).toFixed(2)}%`, 9)}${pad(`${(gc * 100).toFixed(2)}%`, 8)}${pad(`${perScrape.toFixed(0)} µs`, 14)}${pad(String(rs.reduce((n, r) => n + r.bad, 0)), 8)}${verdict}`,
  )
}
await Promise.all(instances.map((i) => i.close()))
router.close()
await stopStarted()
