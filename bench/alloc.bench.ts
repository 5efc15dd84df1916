// Allocation budget: the bytes V8 allocates in the router's process per proxied request, for
// 8 KiB chat requests (whole JSON answers and SSE streams) and SageMaker invocations of the
// same body (routed by its first bytes, with no JSON parse) against a fast stub upstream, beside
// the same figure for bench/peers/node-floor.mjs (a bare Node proxy over undici) in the same
// run: what the floor allocates is Node's and undici's own, the rest is the router's. Each
// proxy runs in its own process with bench/alloc/probe.mjs preloaded, which counts the bytes
// between 'start' and 'stop' from V8's GC profile; the load generator (this process) does
// not count. Warm-up requests are sent before 'start'. The router's rows also print the
// median of serve's own routing-decision histogram over the measured requests.
// Run: npm run bench:alloc   (REQUESTS=10000 WARMUP=2000 CONCURRENCY=8 or RATE=1000 to change the load;
// CASES=chat-json,invoke to run only some cases; BASELINE=/path/to/another/checkout, built,
// adds that checkout's router, with and without its access log, to each case: a same-run
// baseline for the bytes and the decision time)
import os from 'node:os'
import { loadShape, cases, load, root, start, stop, stopAll, type Case, type Proc } from './alloc/load.js'

const REQUESTS = Number(process.env.REQUESTS ?? 10_000)
const WARMUP = Number(process.env.WARMUP ?? 2_000)
const PROBE = ['--import', process.env.ALLOC_PROBE ?? './bench/alloc/probe.mjs']
const CASES = cases()
const BASELINE = process.env.BASELINE

interface Bucket { labels: { le?: number | string }; value: number; metricName?: string }

/** Cumulative bucket counts of serve's decision histogram, by upper bound. */
async function decisionBuckets(p: Proc): Promise<Map<number, number>> {
  const { decision } = await p.ask<{ decision: Bucket[] }>('decision')
  const out = new Map<number, number>()
  for (const v of decision) if (v.metricName?.endsWith('_bucket') && v.labels.le !== '+Inf') out.set(Number(v.labels.le), (out.get(Number(v.labels.le)) ?? 0) + v.value)
  return out
}

/**
 * The median of what was observed between `a` and `b`, interpolated within its bucket as
 * Prometheus' histogram_quantile does, with the bucket's bounds.
 */
function median(a: Map<number, number>, b: Map<number, number>): string {
  const bounds = [...b.keys()].sort((x, y) => x - y)
  const us = (s: number) => `${+(s * 1e6).toPrecision(3)} µs`
  let lower = 0
  let below = 0
  for (const le of bounds) {
    const count = (b.get(le) ?? 0) - (a.get(le) ?? 0)
    if (count >= REQUESTS / 2) {
      const at = lower + ((le - lower) * (REQUESTS / 2 - below)) / Math.max(1, count - below)
      return `${us(at)} (bucket ${us(lower)}–${us(le)})`
    }
    lower = le
    below = count
  }
  return `> ${us(bounds.at(-1)!)}`
}

interface Row { name: string; c: Case; bytes: number; gcs: number; decision?: string }

async function measure(name: string, args: string[], c: Case, router: boolean, cwd = root): Promise<Row> {
  const p = await start([...PROBE, ...args], true, cwd)
  try {
    await load(p.url, WARMUP, c)
    const before = router ? await decisionBuckets(p) : undefined
    await p.ask('start')
    await load(p.url, REQUESTS, c)
    const { bytes, gcs } = await p.ask<{ bytes: number; gcs: number }>('stop')
    const decision = before && median(before, await decisionBuckets(p))
    return { name, c, bytes: bytes / REQUESTS, gcs, ...(decision !== undefined && { decision }) }
  } finally {
    await stop(p)
  }
}

async function main(): Promise<void> {
  const cpus = os.cpus()
  console.log(`${cpus[0]?.model ?? 'unknown CPU'}, ${os.availableParallelism()} cores available, Node ${process.version}`)
  console.log(`${REQUESTS.toLocaleString('en-US')} requests measured per row after ${WARMUP.toLocaleString('en-US')} of warm-up, ${loadShape()}, 8 KiB chat bodies\n`)
  const stub = await start(['bench/stub-upstream.mjs'], false)
  const rows: Row[] = []
  for (const c of CASES) {
    rows.push(await measure('node-floor', ['bench/peers/node-floor.mjs', stub.url], c, false))
    rows.push(await measure('router', ['bench/alloc/router.mjs', stub.url, 'on'], c, true))
    rows.push(await measure('router, no access log', ['bench/alloc/router.mjs', stub.url, 'off'], c, true))
    if (BASELINE !== undefined) {
      rows.push(await measure('baseline', ['bench/alloc/router.mjs', stub.url, 'on'], c, true, BASELINE))
      rows.push(await measure('baseline, no access log', ['bench/alloc/router.mjs', stub.url, 'off'], c, true, BASELINE))
    }
  }
  await stop(stub)
  const kib = (b: number) => `${(b / 1024).toFixed(1)} KiB`
  console.log(`${'proxy'.padEnd(24)}${'request'.padEnd(11)}${'per request'.padStart(13)}${'GCs'.padStart(6)}${'× floor'.padStart(9)}${'above floor'.padStart(13)}   decision median (serve's histogram)`)
  for (const r of rows) {
    const floor = rows.find((f) => f.name === 'node-floor' && f.c === r.c)!
    console.log(
      `${r.name.padEnd(24)}${r.c.label.padEnd(11)}${kib(r.bytes).padStart(13)}${String(r.gcs).padStart(6)}${`${(r.bytes / floor.bytes).toFixed(2)}x`.padStart(9)}${kib(r.bytes - floor.bytes).padStart(13)}   ${r.decision ?? ''}`,
    )
  }
}

try {
  await main()
} finally {
  stopAll()
}
