// What a hostile peer costs a running router: a real `serve` process (dist/cli.js) pinged on
// GET /ping back to back (5 ms apart, one keep-alive connection) while its resident memory
// (VmRSS) is sampled every 50 ms, first in a baseline window, then in an attack window of the
// same length; the worst /ping, its 99th percentile and the largest RSS of each are printed
// side by side, with the router's own largest event-loop delay over the window (from its admin
// /metrics: what the router did, apart from this shared machine's scheduling). Warm-up (the first WARMUP_S after the router is ready) is discarded.
//
//   metrics: the one instance's /metrics turns into a 400 MiB page (the load gauges, then
//            comment lines, no prefix-cache counters): the engine-load scraper reads it every
//            100 ms and the cache probe every METRICS_PROBE_MS (1000 here, 10 s by default).
//   share:   two replicas sharing load through a real redis-server; a hostile publisher sends
//            BURSTS bursts, a second apart, of 1,000 messages under distinct replica ids, each
//            naming 1,001 instances (MAX_SAFE_INTEGER blocks on the real one).
//
// Run: npm run bench:hostile-load   (ATTACKS=metrics,share WINDOW_S=8 WARMUP_S=2
//   METRICS_MIB=400 METRICS_PROBE_MS=1000 BURSTS=5 PUBLISHER_NICE=19 (0: the hostile publisher at
//   the routers' priority) FIGURE=9007199254740991 (the blocks each hostile id says it queued); SERVE_ROOT=DIR runs DIR/dist/cli.js, e.g.
//   an older build, for a before/after)
import { readFileSync, writeFileSync, mkdtempSync } from 'node:fs'
import { tmpdir } from 'node:os'
import { join } from 'node:path'
import { fileURLToPath } from 'node:url'
import { Client } from 'undici'
import { histogram, machine, startNodeScript, startProcess, stopStarted, type Started } from './harness.js'
import { startRedisServer } from './redis.js'

const ATTACKS = (process.env.ATTACKS ?? 'metrics,share').split(',')
const WINDOW_S = Number(process.env.WINDOW_S ?? 8)
const WARMUP_S = Number(process.env.WARMUP_S ?? 2)
const METRICS_MIB = Number(process.env.METRICS_MIB ?? 400)
const METRICS_PROBE_MS = Number(process.env.METRICS_PROBE_MS ?? 1000)
const BURSTS = Number(process.env.BURSTS ?? 5)
const PUBLISHER_NICE = Number(process.env.PUBLISHER_NICE ?? 19)
const root = fileURLToPath(new URL('..', import.meta.url))
const serveRoot = process.env.SERVE_ROOT ?? root
const sleep = (ms: number) => new Promise((r) => setTimeout(r, ms))

/** RSS of a process now, in MiB (Linux); NaN once it has exited. */
function rssMiB(pid: number): number {
  try {
    const m = /VmRSS:\s+(\d+) kB/.exec(readFileSync(`/proc/${pid}/status`, 'utf8'))
    return m ? Number(m[1]) / 1024 : NaN
  } catch {
    return NaN
  }
}

/** CPU time a process has used (user + system), in ms; NaN once it has exited. */
function cpuMs(pid: number): number {
  try {
    const f = readFileSync(`/proc/${pid}/stat`, 'utf8').split(') ')[1]!.split(' ')
    return ((Number(f[11]) + Number(f[12])) * 1000) / 100 // clock ticks of 10 ms (USER_HZ)
  } catch {
    return NaN
  }
}

interface Router {
  name: string
  started: Started
  url: string
  admin: string
}

/** `serve --config FILE` from serveRoot; ready once it prints its URLs. */
async function serve(name: string, config: object): Promise<Router> {
  const dir = mkdtempSync(join(tmpdir(), 'hostile-'))
  const file = join(dir, 'config.json')
  writeFileSync(file, JSON.stringify(config))
  const started = await startProcess(process.execPath, ['dist/cli.js', 'serve', '--config', file, '--log-level', 'warn'], /on (http:\/\/[\d.:]+) \(admin (http:\/\/[\d.:]+)\)/, 'stderr', { cwd: serveRoot })
  return { name, started, url: started.match[1]!, admin: started.match[2]! }
}

const baseConfig = (upstream: string) => ({
  listen: { host: '127.0.0.1', port: 0 },
  admin: { host: '127.0.0.1', port: 0 },
  warmup: { requests: 0 },
  discovery: { modelsIntervalMs: 30_000, metricsIntervalMs: METRICS_PROBE_MS },
  routing: { strategy: 'longest_prefix' },
  engineLoad: { mode: process.env.ENGINE_LOAD_MODE ?? 'auto', intervalMs: 100 },
  endpoints: [{ name: 'default', instances: [upstream] }],
})

interface Window {
  maxPingMs: number
  p99PingMs: number
  pings: number
  failed: number
  maxRssMiB: number
  startRssMiB: number
  /** The router's own largest event-loop delay over the window (prom-client's nodejs_eventloop_lag_max_seconds, reset at each scrape). */
  maxLoopMs: number
  /** Its CPU over the window, as a share of one core. */
  cpu: number
}

/** The router's largest event-loop delay since the previous call, in ms (its admin /metrics). */
async function loopMaxMs(r: Router): Promise<number> {
  const text = await (await fetch(`${r.admin}/metrics`)).text()
  return Number(/^nodejs_eventloop_lag_max_seconds (\S+)/m.exec(text)?.[1] ?? NaN) * 1000
}

/** Pings each router and samples its RSS for `seconds`, while `during` runs (its end does not end the window). */
async function measure(routers: Router[], seconds: number, during?: () => Promise<void>): Promise<Window[]> {
  for (const r of routers) await loopMaxMs(r).catch(() => NaN)
  const end = performance.now() + seconds * 1000
  const t0 = performance.now()
  const out = routers.map((r) => ({ r, h: histogram(), max: 0, failed: 0, rss: rssMiB(r.started.pid), start: rssMiB(r.started.pid), cpu0: cpuMs(r.started.pid) }))
  const sampler = setInterval(() => {
    for (const o of out) {
      const now = rssMiB(o.r.started.pid)
      if (!Number.isNaN(now)) o.rss = Math.max(o.rss, now)
    }
  }, 50)
  const attack = during?.()
  await Promise.all(
    out.map(async (o) => {
      const client = new Client(o.r.url, { keepAliveTimeout: 60_000 })
      while (performance.now() < end) {
        const t0 = performance.now()
        try {
          const res = await client.request({ path: '/ping', method: 'GET', headersTimeout: 30_000, bodyTimeout: 30_000 })
          await res.body.dump()
          if (res.statusCode !== 200) o.failed++
        } catch {
          o.failed++
        }
        const ms = performance.now() - t0
        o.h.recordValue(Math.max(1, Math.round(ms * 1000)))
        o.max = Math.max(o.max, ms)
        await sleep(5)
      }
      await client.close()
    }),
  )
  await attack
  clearInterval(sampler)
  const wall = performance.now() - t0
  const cpus = out.map((o) => (cpuMs(o.r.started.pid) - o.cpu0) / wall)
  const loops = await Promise.all(routers.map((r) => loopMaxMs(r).catch(() => NaN)))
  return out.map((o, i) => ({
    cpu: cpus[i]!,
    maxLoopMs: loops[i]!, maxPingMs: o.max, p99PingMs: o.h.getValueAtPercentile(99) / 1000, pings: o.h.totalCount, failed: o.failed, maxRssMiB: o.rss, startRssMiB: o.start }))
}

function print(title: string, routers: Router[], base: Window[], attack: Window[]): void {
  console.log(`\n${title}`)
  console.log('router   window     pings  failed  max /ping   p99 /ping   max loop delay  CPU (1 core)  RSS at start  max RSS')
  routers.forEach((r, i) => {
    for (const [name, w] of [['baseline', base[i]!], ['attack', attack[i]!]] as const) {
      console.log(`${r.name.padEnd(8)} ${name.padEnd(9)} ${String(w.pings).padStart(6)}  ${String(w.failed).padStart(6)}  ${`${w.maxPingMs.toFixed(1)} ms`.padStart(9)}   ${`${w.p99PingMs.toFixed(2)} ms`.padStart(9)}   ${`${w.maxLoopMs.toFixed(1)} ms`.padStart(14)}  ${`${(w.cpu * 100).toFixed(0)}%`.padStart(12)}  ${`${w.startRssMiB.toFixed(0)} MiB`.padStart(10)}  ${`${w.maxRssMiB.toFixed(0)} MiB`.padStart(8)}`)
    }
    const b = base[i]!
    const a = attack[i]!
    console.log(`${r.name.padEnd(8)} attack/baseline: max /ping ${(a.maxPingMs / b.maxPingMs).toFixed(2)}x, max RSS ${(a.maxRssMiB / b.maxRssMiB).toFixed(2)}x${Number.isNaN(rssMiB(r.started.pid)) ? ' (the process has exited)' : ''}`)
  })
}

async function getJson(url: string): Promise<unknown> {
  const res = await fetch(url)
  return res.json()
}

async function metricsAttack(): Promise<void> {
  const up = await startNodeScript(['--import', 'tsx', 'bench/hostile/upstream.ts'])
  const upstream = `http://127.0.0.1:${up.match[1]}`
  const r = await serve('serve', baseConfig(upstream))
  await sleep(WARMUP_S * 1000)
  await getJson(`${upstream}/attack?mib=0`)
  const base = await measure([r], WINDOW_S)
  const baseBytes = ((await getJson(`${upstream}/attack?mib=${METRICS_MIB}`)) as { metricsBytesWritten: number }).metricsBytesWritten
  const attack = await measure([r], WINDOW_S)
  const attackBytes = ((await getJson(`${upstream}/attack?mib=0`)) as { metricsBytesWritten: number }).metricsBytesWritten
  const inst = ((await getJson(`${r.admin}/admin/instances`)) as { endpoints: { instances: { engineLoad: { state: string; bodiesCut?: number; scrapes: Record<string, number> } | null; metricsPagesCut?: number }[] }[] }).endpoints[0]!.instances[0]!
  print(`metrics: a ${METRICS_MIB} MiB /metrics page (scraped every 100 ms, cache probe every ${METRICS_PROBE_MS} ms), ${WINDOW_S} s windows`, [r], base, attack)
  const mbps = (b: number) => `${(b / 1024 / 1024 / WINDOW_S).toFixed(1)} MiB/s`
  console.log(`/metrics bytes the instance got to send: baseline ${mbps(baseBytes)}, attack ${mbps(attackBytes)} (written into the sockets, kernel buffers included)`)
  console.log(`after the attack: engine load ${inst.engineLoad?.state}, scrapes ${JSON.stringify(inst.engineLoad?.scrapes)}, bodies cut ${inst.engineLoad?.bodiesCut ?? 'n/a'}, metrics pages cut ${inst.metricsPagesCut ?? 'n/a'}`)
  await r.started.stop()
  await up.stop()
}

async function shareAttack(): Promise<void> {
  const redis = await startRedisServer()
  try {
    const { url } = redis
    const up = await startNodeScript(['--import', 'tsx', 'bench/hostile/upstream.ts'])
    const upstream = `http://127.0.0.1:${up.match[1]}`
    const routers = [await serve('r1', { ...baseConfig(upstream), shareLoad: { url }, replicaId: 'r1' }), await serve('r2', { ...baseConfig(upstream), shareLoad: { url }, replicaId: 'r2' })]
    const peers = async (r: Router) => ((await getJson(`${r.admin}/admin/replicas`)) as { peers: unknown[] }).peers.length
    for (let i = 0; ; i++) {
      if ((await peers(routers[0]!)) === 1 && (await peers(routers[1]!)) === 1) break
      if (i > 200) throw new Error('the replicas did not hear each other')
      await sleep(50)
    }
    await sleep(WARMUP_S * 1000)
    const base = await measure(routers, WINDOW_S)
    let published = ''
    const attack = await measure(routers, Math.max(WINDOW_S, BURSTS + 3), async () => {
      // The publisher at a low priority: on a small shared machine its own CPU would otherwise
      // be what delays the routers, not their handling of what it sends.
      try {
        const p = await startProcess('nice', ['-n', String(PUBLISHER_NICE), process.execPath, '--import', 'tsx', 'bench/hostile/publish.ts', url, upstream], /done/, 'stdout', { cwd: root, env: { ...process.env, BURSTS: String(BURSTS) } }, 600_000)
        published = p.output().trim()
        await p.stop()
      } catch (err) {
        // The publisher failing (Redis gone, say) ends the attack early; the windows still count.
        published = `the publisher failed: ${(err as Error).message.slice(0, 400)}`
      }
    })
    print(`share: 1,000 hostile replica ids x 1,001 instances, ${BURSTS} bursts a second apart, against 2 replicas`, routers, base, attack)
    console.log(published.split('\n').filter((l) => l.startsWith('burst') || l.startsWith('the publisher')).join('; '))
    for (const r of routers) {
      if (Number.isNaN(rssMiB(r.started.pid))) {
        console.log(`${r.name}: exited during the attack: ${r.started.output().slice(-600)}`)
        continue
      }
      const rep = (await getJson(`${r.admin}/admin/replicas`)) as { peers: unknown[]; messages: Record<string, number>; connectionFailures: number; sharedPrefillBlocks: Record<string, Record<string, number>> }
      console.log(`${r.name}: peers ${rep.peers.length}, messages ${JSON.stringify(rep.messages)}, connection failures ${rep.connectionFailures}, shared prefill on the real instance ${rep.sharedPrefillBlocks.default?.[upstream] ?? 0}`)
    }
    for (const r of routers) await r.started.stop()
    await up.stop()
  } finally {
    redis.stop()
  }
}

console.log(`machine: ${machine()}`)
console.log(`serve from ${serveRoot === root ? 'this checkout' : serveRoot}`)
try {
  if (ATTACKS.includes('metrics')) await metricsAttack()
  if (ATTACKS.includes('share')) await shareAttack()
} finally {
  await stopStarted()
}
