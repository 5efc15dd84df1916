// Where a proxied request's CPU time goes: the router (bench/alloc/router.mjs, a ProxyServer as
// serve runs it, access log on) and node-floor (bench/peers/node-floor.mjs) each under the same
// closed-loop load as bench:alloc, with V8's sampling profiler (bench/alloc/cpu-probe.mjs)
// running over the measured requests only. Prints, per request, the sampled main-thread time
// and its largest parts by function and by file, the router's beside the floor's: what
// the router spends above the floor is the list to cut from. The profiler's own overhead
// falls on both alike; compare the two columns, not the absolute figures with bench:proxy's.
// Run: npm run bench:profile   (REQUESTS=20000 WARMUP=3000 CONCURRENCY=8 or RATE=1000, TOP=30 CASES=chat-json;
// PROFILE_DIR=dir also writes each .cpuprofile there, for Chrome DevTools; FLOOR=metrics (or
// headers, route) profiles a level of bench/peers/node-proxy.mjs in place of node-floor, with
// PATHS=serve for serve's own key extraction and metrics there, so that the table is what the
// router spends above a correct router rather than above a bare proxy; ACCESS_LOG=off runs the
// router without its access log, as the ladder's levels and bench:proxy's serve run)
import { mkdirSync, writeFileSync } from 'node:fs'
import { join } from 'node:path'
import { cases, load, loadShape, start, stop, stopAll, type Case } from './alloc/load.js'
import { machine } from './harness.js'

const REQUESTS = Number(process.env.REQUESTS ?? 20_000)
const WARMUP = Number(process.env.WARMUP ?? 3_000)
const TOP = Number(process.env.TOP ?? 30)
const PROFILE_DIR = process.env.PROFILE_DIR
const PROBE = ['--import', './bench/alloc/cpu-probe.mjs']
const FLOOR = process.env.FLOOR ?? 'node-floor'
const ACCESS_LOG = process.env.ACCESS_LOG ?? 'on'
if (!['node-floor', 'headers', 'route', 'metrics'].includes(FLOOR)) throw new Error(`FLOOR must be node-floor, headers, route or metrics, not '${FLOOR}'`)
if (!['on', 'off'].includes(ACCESS_LOG)) throw new Error(`ACCESS_LOG must be on or off, not '${ACCESS_LOG}'`)
const floorArgs = (url: string) => (FLOOR === 'node-floor' ? ['bench/peers/node-floor.mjs', url] : ['bench/peers/node-proxy.mjs', url, FLOOR])

interface CallFrame { functionName: string; url: string; lineNumber: number }
interface Profile { nodes: { id: number; callFrame: CallFrame }[]; samples: number[]; timeDeltas: number[] }

/** A file as the tables show it: the part of its path that says whose it is. */
function fileOf(url: string): string {
  if (url === '') return '(native)'
  const m = /\/(dist|bench)\/(.*)$/.exec(url) ?? /node_modules\/(.*)$/.exec(url)
  if (m) return m.length === 3 ? `${m[1]}/${m[2]}` : m[1]!
  return url.replace(/^file:\/\//, '')
}

/** Self time in µs per request, by function and by file; (idle) is left out. */
function selfTimes(p: Profile, requests: number) {
  const byId = new Map(p.nodes.map((n) => [n.id, n.callFrame]))
  const fn = new Map<string, number>()
  const file = new Map<string, number>()
  let total = 0
  // Each sample stands for the time until the next one.
  for (let i = 0; i < p.samples.length - 1; i++) {
    const f = byId.get(p.samples[i]!)!
    if (f.functionName === '(idle)') continue
    const t = p.timeDeltas[i + 1]! / requests
    total += t
    const name = `${f.functionName || '(anonymous)'}${f.url ? ` ${fileOf(f.url)}:${f.lineNumber + 1}` : ''}`
    fn.set(name, (fn.get(name) ?? 0) + t)
    const where = f.url ? fileOf(f.url) : f.functionName
    file.set(where, (file.get(where) ?? 0) + t)
  }
  return { total, fn, file }
}

async function profile(name: string, args: string[], c: Case): Promise<ReturnType<typeof selfTimes>> {
  const p = await start([...PROBE, ...args], true)
  try {
    await load(p.url, WARMUP, c)
    await p.ask('start')
    await load(p.url, REQUESTS, c)
    const { profile } = await p.ask<{ profile: Profile }>('stop')
    if (PROFILE_DIR !== undefined) {
      mkdirSync(PROFILE_DIR, { recursive: true })
      writeFileSync(join(PROFILE_DIR, `${name}-${c.label.replace(/ /g, '-')}.cpuprofile`), JSON.stringify(profile))
    }
    return selfTimes(profile, REQUESTS)
  } finally {
    await stop(p)
  }
}

function table(title: string, router: Map<string, number>, floor: Map<string, number>): void {
  const rows = [...router].sort((a, b) => b[1] - a[1]).slice(0, TOP)
  console.log(`\n  ${title}${' '.repeat(Math.max(1, 70 - title.length))}router µs   floor µs`)
  for (const [k, v] of rows) console.log(`  ${k.slice(0, 78).padEnd(80)}${v.toFixed(1).padStart(7)}${(floor.get(k) ?? 0).toFixed(1).padStart(11)}`)
}

async function main(): Promise<void> {
  console.log(`prefix-router CPU profile per request — ${machine()}`)
  console.log(`baseline: ${FLOOR === 'node-floor' ? 'node-floor' : `bench/peers/node-proxy.mjs at level ${FLOOR} (PATHS=${process.env.PATHS ?? 'public'})`}; router access log ${ACCESS_LOG}`)
  console.log(`${REQUESTS.toLocaleString('en-US')} requests profiled per proxy after ${WARMUP.toLocaleString('en-US')} of warm-up, ${loadShape()}; V8 sampling profiler, 100 µs interval, main thread only`)
  const stub = await start(['bench/stub-upstream.mjs'], false)
  try {
    for (const c of cases()) {
      const floor = await profile(FLOOR, floorArgs(stub.url), c)
      const router = await profile('router', ['bench/alloc/router.mjs', stub.url, ACCESS_LOG], c)
      console.log(`\n${c.label}: sampled CPU per request: router ${router.total.toFixed(0)} µs, ${FLOOR} ${floor.total.toFixed(0)} µs (${(router.total / floor.total).toFixed(2)}×)`)
      table('self time by function', router.fn, floor.fn)
      table('self time by file', router.file, floor.file)
    }
  } finally {
    await stop(stub)
  }
}

try {
  await main()
} finally {
  stopAll()
}
