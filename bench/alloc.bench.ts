// Allocation budget: the bytes V8 allocates in the router's process per proxied request, for
// 8 KiB chat requests (whole JSON answers and SSE streams) and SageMaker invocations of the
// same body (routed by its first bytes, with no JSON parse) against a fast stub upstream, beside
// the same figure for bench/peers/node-floor.mjs (a bare Node proxy over undici) in the same
// run: what the floor allocates is Node's and undici's own, the rest is the router's. Each
// proxy runs in its own process with bench/alloc/probe.mjs preloaded, which counts the bytes
// between 'start' and 'stop' from V8's GC profile; the load generator (this process) does
// not count. Warm-up requests are sent before 'start'. The router's rows also print the
// median of serve's own routing-decision histogram over the measured requests.
// Run: npm run bench:alloc   (REQUESTS=10000 WARMUP=2000 CONCURRENCY=8 to change the load;
// CASES=chat-json,invoke to run only some cases; BASELINE=/path/to/another/checkout, built,
// adds that checkout's router to each case, as a same-run baseline for the decision time)
import { spawn, type ChildProcess } from 'node:child_process'
import os from 'node:os'
import { fileURLToPath } from 'node:url'
import { Client } from 'undici'

const REQUESTS = Number(process.env.REQUESTS ?? 10_000)
const WARMUP = Number(process.env.WARMUP ?? 2_000)
const CONCURRENCY = Number(process.env.CONCURRENCY ?? 8)
const root = fileURLToPath(new URL('..', import.meta.url))
const PROBE = ['--import', process.env.ALLOC_PROBE ?? './bench/alloc/probe.mjs']
const children: ChildProcess[] = []

interface Proc {
  child: ChildProcess
  url: string
  ask<T>(msg: string): Promise<T>
}

function start(args: string[], ipc: boolean, cwd = root): Promise<Proc> {
  const child = spawn(process.execPath, args, { cwd, stdio: ['ignore', 'pipe', 'pipe', ...(ipc ? (['ipc'] as const) : [])] })
  children.push(child)
  let out = ''
  const ask = <T>(msg: string) =>
    new Promise<T>((resolve) => {
      child.once('message', (m) => resolve(m as T))
      child.send(msg)
    })
  return new Promise((resolve, reject) => {
    const onData = (d: Buffer) => {
      out += d.toString()
      const m = /listening (\d+)/.exec(out)
      if (m) resolve({ child, url: `http://127.0.0.1:${m[1]}`, ask })
    }
    child.stdout!.on('data', onData)
    child.stderr!.on('data', (d: Buffer) => void (out += d.toString()))
    child.once('exit', (c) => reject(new Error(`${args.join(' ')} exited ${c}: ${out}`)))
  })
}

function stop(p: Proc): Promise<void> {
  return new Promise((resolve) => {
    if (p.child.exitCode !== null) return resolve()
    p.child.once('exit', () => resolve())
    p.child.kill('SIGTERM')
  })
}

// An 8 KiB chat body, as in bench/proxy.bench.ts: a long shared system prompt and a short question.
function body(i: number, stream: boolean): string {
  const system = 'You are the support assistant of a large retailer; answer from the policy below. '.repeat(96).slice(0, 7900)
  return JSON.stringify({ model: 'stub', messages: [{ role: 'system', content: system }, { role: 'user', content: `question ${i}` }], max_tokens: 8, stream })
}

/**
 * What is sent: chat completions, whole and streamed, whose routing key is text taken from the
 * parsed body, and SageMaker invocations of the same body, whose key is its first bytes.
 */
interface Case { label: string; path: string; stream: boolean }
const ALL_CASES: Case[] = [
  { label: 'chat JSON', path: '/v1/chat/completions', stream: false },
  { label: 'chat SSE', path: '/v1/chat/completions', stream: true },
  { label: 'invoke', path: '/invocations', stream: false },
]
const slug = (c: Case) => c.label.toLowerCase().replace(/ /g, '-')
const CASES = process.env.CASES === undefined ? ALL_CASES : ALL_CASES.filter((c) => process.env.CASES!.split(',').includes(slug(c)))
if (CASES.length === 0) throw new Error(`CASES must list some of ${ALL_CASES.map(slug).join(', ')}`)
const BASELINE = process.env.BASELINE

/** `n` requests, CONCURRENCY at a time, each read to its end; throws on any non-200. */
async function load(url: string, n: number, c: Case): Promise<void> {
  const { path, stream } = c
  const client = new Client(url, { pipelining: 1, keepAliveTimeout: 60_000 })
  const bodies = Array.from({ length: 64 }, (_, i) => body(i, stream))
  let next = 0
  const worker = async () => {
    while (next < n) {
      const i = next++
      const res = await client.request({ path, method: 'POST', body: bodies[i % 64]!, headers: { 'content-type': 'application/json' } })
      for await (const _ of res.body);
      if (res.statusCode !== 200) throw new Error(`${url}: status ${res.statusCode}`)
    }
  }
  await Promise.all(Array.from({ length: CONCURRENCY }, worker))
  await client.close()
}

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
  console.log(`${REQUESTS.toLocaleString('en-US')} requests measured per row after ${WARMUP.toLocaleString('en-US')} of warm-up, ${CONCURRENCY} at a time, 8 KiB chat bodies\n`)
  const stub = await start(['bench/stub-upstream.mjs'], false)
  const rows: Row[] = []
  for (const c of CASES) {
    rows.push(await measure('node-floor', ['bench/peers/node-floor.mjs', stub.url], c, false))
    rows.push(await measure('router', ['bench/alloc/router.mjs', stub.url, 'on'], c, true))
    rows.push(await measure('router, no access log', ['bench/alloc/router.mjs', stub.url, 'off'], c, true))
    if (BASELINE !== undefined) {
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
  for (const c of children) if (c.exitCode === null) c.kill('SIGTERM')
}
