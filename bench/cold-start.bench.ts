// A fresh router under load from its first moment, as a replica started by a rollout or an
// autoscaler sees it: `serve` (from dist) starts in front of the stub upstream, and as soon as
// it prints that it listens, an open loop of RATE req/s of 8 KiB chat bodies starts. Latency
// runs from each request's scheduled time (so a router that falls behind shows its queue),
// bucketed by the second it was due in (the first second also by 100 ms). Warm-up off and on
// alternate in ROUNDS turns, each a new process, so the machine's noise falls on both alike.
// What is warmed on the generator's side, and why: the target is the router's cold start, not
// the generator's. Its JIT is warmed by the same load against the stub first (discarded), and
// its 256 connections to each router are opened before that router's clock starts, when it
// listens (undici would open them lazily, one per concurrent request, in the first second,
// and the generator's 256 connects would share this machine's CPUs with the router's first
// second). No request reaches the router before the clock starts; its side of accepting those
// connections is before it too (a real replica accepts its balancer's connections as the
// traffic comes), while its first request on each of them is not.
// Run: npm run bench:cold   (RATE=1000 SECONDS=15 ROUNDS=3 WARMUP_REQUESTS=<serve's default>;
// to look inside: SERVE_FLAGS='--trace-gc' adds node flags to serve, LOG_DIR=dir keeps its output;
// PRECONNECT=0: the generator connects lazily, during the first second)
import { mkdtempSync, writeFileSync } from 'node:fs'
import net from 'node:net'
import { monitorEventLoopDelay } from 'node:perf_hooks'
import { tmpdir } from 'node:os'
import { join } from 'node:path'
import { fileURLToPath } from 'node:url'
import * as hdr from 'hdr-histogram-js'
import { buildConnector, Pool } from 'undici'
import { chatBody, machine, startProcess } from './harness.js'

const RATE = Number(process.env.RATE ?? 1000)
const SECONDS = Number(process.env.SECONDS ?? 15)
const ROUNDS = Number(process.env.ROUNDS ?? 3)
const STEADY = [Math.min(10, SECONDS - 1), SECONDS] as const
const root = fileURLToPath(new URL('..', import.meta.url))
// Level info for the warm-up's "warmed up" line (how long it took), without the access log's
// line per request, which the proxy benchmark does not pay either.
const CONFIG = join(mkdtempSync(join(tmpdir(), 'prefix-router-cold-')), 'config.json')
writeFileSync(CONFIG, JSON.stringify({ log: { level: 'info', accessLog: false } }))

const histogram = () => hdr.build({ lowestDiscernibleValue: 1, highestTrackableValue: 120_000_000, numberOfSignificantValueDigits: 3 })

interface Run {
  perSecond: hdr.Histogram[]
  /** The first second in tenths: where in it the time goes. */
  firstTenths: hdr.Histogram[]
  /** The generator's own longest event-loop stall in the first second, ms: a late send shows as router latency. */
  generatorStallMs: number
  steady: hdr.Histogram
  errors: number
  /** From spawn to the port accepting, ms. */
  startMs: number
  warmLine: string | undefined
}

const CONNECTIONS = 256
/** PRECONNECT=0: the generator connects lazily, as before (to compare). */
const PRECONNECT = process.env.PRECONNECT !== '0'

/**
 * The generator's pool, its CONNECTIONS TCP connections opened before the clock starts and
 * handed to undici as it asks for them: undici connects lazily, and 256 connects in the first
 * second are the generator's start-up, not the router's. No request is sent on them before.
 */
async function preconnectedPool(url: string): Promise<Pool> {
  const { hostname, port } = new URL(url)
  const sockets = await Promise.all(
    Array.from(
      { length: CONNECTIONS },
      () =>
        new Promise<net.Socket>((resolve, reject) => {
          const s = net.connect({ host: hostname, port: Number(port), noDelay: true, keepAlive: true, keepAliveInitialDelay: 60_000 })
          s.once('connect', () => resolve(s)).once('error', reject)
        }),
    ),
  )
  const fallback = buildConnector({})
  return new Pool(url, {
    connections: CONNECTIONS,
    pipelining: 1,
    keepAliveTimeout: 60_000,
    connect(opts, cb) {
      const s = sockets.pop()
      if (s === undefined || s.destroyed) return fallback(opts, cb)
      // Later, as a real connect answers: undici's client stalls when the callback comes before connect() returns.
      process.nextTick(cb, null, s)
    },
  })
}

/** Open loop at RATE from the moment the router listens; latency in µs from each request's scheduled time. */
async function load(url: string, seconds = SECONDS): Promise<Pick<Run, 'perSecond' | 'firstTenths' | 'generatorStallMs' | 'steady' | 'errors'>> {
  const pool = PRECONNECT ? await preconnectedPool(url) : new Pool(url, { connections: CONNECTIONS, pipelining: 1, keepAliveTimeout: 60_000 })
  const perSecond = Array.from({ length: seconds }, histogram)
  const firstTenths = Array.from({ length: 10 }, histogram)
  const steady = histogram()
  const bodies = Array.from({ length: 64 }, (_, i) => chatBody(i, i % 2 === 1))
  const n = RATE * seconds
  const interval = 1e9 / RATE
  const stall = monitorEventLoopDelay({ resolution: 5 })
  stall.enable()
  let generatorStallMs = 0
  setTimeout(() => {
    generatorStallMs = stall.max / 1e6
    stall.disable()
  }, 1000)
  const t0 = process.hrtime.bigint()
  const pending: Promise<void>[] = []
  let errors = 0
  let i = 0
  await new Promise<void>((resolve) => {
    const tick = () => {
      const now = Number(process.hrtime.bigint() - t0)
      for (; i < n && i * interval <= now; i++) {
        const due = i * interval
        const second = Math.floor(i / RATE)
        pending.push(
          pool.request({ path: '/v1/chat/completions', method: 'POST', body: bodies[i % 64]!, headers: { 'content-type': 'application/json' } }).then(
            async (res) => {
              for await (const _ of res.body);
              if (res.statusCode !== 200) errors++
              const us = Math.max(1, (Number(process.hrtime.bigint() - t0) - due) / 1000)
              perSecond[second]!.recordValue(us)
              if (second === 0) firstTenths[Math.floor(due / 1e8)]!.recordValue(us)
              if (second >= STEADY[0]) steady.recordValue(us)
            },
            () => void errors++,
          ),
        )
      }
      if (i < n) setTimeout(tick, Math.max(0, (i * interval - Number(process.hrtime.bigint() - t0)) / 1e6))
      else resolve()
    }
    tick()
  })
  await Promise.all(pending)
  await pool.close()
  return { perSecond, firstTenths, generatorStallMs, steady, errors }
}

async function once(upstream: string, warm: boolean): Promise<Run> {
  const warmFlag = warm ? (process.env.WARMUP_REQUESTS !== undefined ? ['--warmup-requests', process.env.WARMUP_REQUESTS] : []) : ['--warmup-requests', '0']
  const t = performance.now()
  const args = ['--initial-old-space-size=128', ...(process.env.SERVE_FLAGS?.split(' ').filter(Boolean) ?? []), 'dist/cli.js', 'serve', '--config', CONFIG, '--upstream', upstream, '--port', '0', '--admin-port', '0', '--host', '127.0.0.1', ...warmFlag]
  const p = await startProcess(process.execPath, args, /on (http:\/\/[\d.:]+) \(admin/, 'stderr', { cwd: root })
  const startMs = performance.now() - t
  try {
    const measured = await load(p.match[1]!)
    // Read after the load: the log (stdout) may arrive after the ready line (stderr).
    if (process.env.LOG_DIR) writeFileSync(join(process.env.LOG_DIR, `serve-${p.pid}-${warm ? 'on' : 'off'}.log`), p.output())
    return { ...measured, startMs, warmLine: /^.*"msg":"warm.*$/m.exec(p.output())?.[0] }
  } finally {
    await p.stop()
  }
}

const ratio = (r: Run) => r.perSecond[0]!.getValueAtPercentile(50) / r.steady.getValueAtPercentile(50)
/** Steady p50 at most this (µs): the router, warm, served RATE without a queue building. */
const KEPT_UP_US = 50_000
const keptUp = (r: Run) => r.steady.getValueAtPercentile(50) <= KEPT_UP_US

const ms = (us: number) => `${(us / 1000).toFixed(us < 10_000 ? 2 : 0)} ms`

async function main(): Promise<void> {
  const stub = await startProcess(process.execPath, ['bench/stub-upstream.mjs'], /listening (\d+)/, 'stdout', { cwd: root })
  const upstream = `http://127.0.0.1:${stub.match[1]}`
  console.log(`fresh-start latency — ${machine()}`)
  console.log('note: the load generator, the stub and the router all share these CPUs')
  console.log(`open loop ${RATE} req/s of 8 KiB chat bodies (half SSE) for ${SECONDS} s from the moment serve listens; latency from each request's scheduled time; ${ROUNDS} rounds, warm-up off and on alternating; the generator's ${CONNECTIONS} connections ${PRECONNECT ? 'opened before the clock starts' : 'opened lazily (PRECONNECT=0)'}\n`)
  const runs: Record<'off' | 'on', Run[]> = { off: [], on: [] }
  try {
    // The load generator's own start (its JIT, its client code) must not count against the
    // first router measured: it runs the same load against the stub first, discarded.
    await load(upstream, 3)
    for (let r = 0; r < ROUNDS; r++) {
      for (const mode of ['off', 'on'] as const) {
        const run = await once(upstream, mode === 'on')
        runs[mode].push(run)
        const cols = run.perSecond.slice(0, 5).map((h) => `${ms(h.getValueAtPercentile(50))} / ${ms(h.getValueAtPercentile(99))}`)
        console.log(`round ${r + 1} warm-up ${mode.padEnd(3)}  listening after ${Math.round(run.startMs)} ms  p50 / p99 by second: ${cols.join(' | ')}  steady p50 ${ms(run.steady.getValueAtPercentile(50))}  ratio ${ratio(run).toFixed(2)}${keptUp(run) ? '' : ' (steady state queued: machine too busy)'}  errors ${run.errors}`)
        console.log(`  1st s p50 by 100 ms: ${run.firstTenths.map((h) => ms(h.getValueAtPercentile(50))).join(' ')}  (generator's longest stall in it: ${run.generatorStallMs.toFixed(0)} ms)`)
        if (run.warmLine) console.log(`  ${run.warmLine}`)
      }
    }
  } finally {
    await stub.stop()
  }
  console.log(`\nsummary (median over rounds; steady = seconds ${STEADY[0]}–${STEADY[1]}):\n`)
  console.log('| warm-up | listening after | 1st s p50 | 1st s p99 | 2nd s p50 | 2nd s p99 | steady p50 | steady p99 | 1st s p50 / steady p50 |')
  console.log('| --- | --- | --- | --- | --- | --- | --- | --- | --- |')
  const med = (xs: number[]) => [...xs].sort((a, b) => a - b)[Math.floor(xs.length / 2)]!
  const ratios: Record<string, number> = {}
  for (const mode of ['off', 'on'] as const) {
    const rs = runs[mode]
    const at = (s: number, p: number) => med(rs.map((x) => x.perSecond[s]!.getValueAtPercentile(p)))
    const st = (p: number) => med(rs.map((x) => x.steady.getValueAtPercentile(p)))
    ratios[mode] = med(rs.map(ratio))
    console.log(`| ${mode} | ${Math.round(med(rs.map((x) => x.startMs)))} ms | ${ms(at(0, 50))} | ${ms(at(0, 99))} | ${ms(at(1, 50))} | ${ms(at(1, 99))} | ${ms(st(50))} | ${ms(st(99))} | ${ratios[mode]!.toFixed(2)} |`)
  }
  // A round whose steady state queued could not sustain RATE even warm (the machine was busy):
  // its small ratio would say nothing about the start, so the verdict leaves it out.
  const kept = runs.on.filter(keptUp)
  const verdict = kept.length === 0 ? 'UNDECIDED (no round kept up in steady state)' : (() => {
    const r = med(kept.map(ratio))
    return `${r.toFixed(2)} × over the ${kept.length} of ${runs.on.length} rounds that kept up — ${r <= 2 ? 'met' : 'MISSED'}`
  })()
  console.log(`\ntarget: with warm-up on, first-second p50 ≤ 2 × steady p50: ${verdict} (all rounds: ${ratios.on!.toFixed(2)} ×; warm-up off: ${ratios.off!.toFixed(2)} ×)`)
}

main().catch((err: unknown) => {
  console.error(err)
  process.exitCode = 1
})
