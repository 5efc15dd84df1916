// Peers that try to stall or bloat the router, against real processes on loopback, each while
// this process asks the router's health check every 10 ms and reads its RSS from /proc:
//
// - bodiless picker streams: `prefix-router epp` (--grpc-tls off) and a hostile gateway
//   (bench/peers/bodiless-streams.mjs, a child process) opening STREAMS ext_proc streams on one
//   connection that send request headers and never a body, for ATTACK_S seconds; once polite
//   (opened after the picker's SETTINGS, as Envoy and node:http2 honour its stream limit), once
//   rude (all in the connection's first flight). Health: grpc.health.v1 Check on the picker's
//   plaintext health port (--grpc-health-port), served by the same event loop.
// - a huge /tokenize answer: `prefix-router serve --tokenizer remote --tokenizer-timeout-ms 5000`
//   in front of a pod (bench/peers/hostile-tokenize.mjs) whose /tokenize answers 10M ids (20 MB,
//   chunked) to every request, sent TOKENIZE_REQUESTS short chats, TOKENIZE_CONCURRENCY at a time.
//   Health: GET /ping on serve's front port.
//
// Each target runs WARMUP_S of probes (discarded), IDLE_S of probes with no attack (the baseline
// from the same run), the attack, then AFTER_S more. Printed per phase: the longest /ping wait
// and the 99th percentile, the ratio of the attack's longest to the idle one's, and RSS (the idle
// maximum, the attack's peak, and after).
//
// BASELINE_ROOT=DIR runs every attack against DIR's dist/cli.js too (a checkout of the code
// before, built), for the numbers the bounds replaced.
// Run: npx tsc -p tsconfig.build.json && npx tsx bench/hostile-peers.bench.ts
//   (STREAMS=20000 ATTACK_S=40 IDLE_S=3 WARMUP_S=2 AFTER_S=3 TOKENIZE_REQUESTS=20 TOKENIZE_CONCURRENCY=2 ONLY=epp|tokenize)
import { credentials } from '@grpc/grpc-js'
import { readFileSync } from 'node:fs'
import net from 'node:net'
import { loadavg } from 'node:os'
import { fileURLToPath } from 'node:url'
import { Client, Pool } from 'undici'
import { healthService } from '../src/epp/protos.js'
import { histogram, machine, startNodeScript, startProcess, stopStarted } from './harness.js'

const STREAMS = Number(process.env.STREAMS ?? 20_000)
const ATTACK_S = Number(process.env.ATTACK_S ?? 40)
const IDLE_S = Number(process.env.IDLE_S ?? 3)
const WARMUP_S = Number(process.env.WARMUP_S ?? 2)
const AFTER_S = Number(process.env.AFTER_S ?? 3)
const TOKENIZE_REQUESTS = Number(process.env.TOKENIZE_REQUESTS ?? 20)
const TOKENIZE_CONCURRENCY = Number(process.env.TOKENIZE_CONCURRENCY ?? 2)
const ONLY = process.env.ONLY
const PROBE_EVERY_MS = 10
const RSS_EVERY_MS = 25

const here = fileURLToPath(new URL('..', import.meta.url))
const roots: [string, string][] = [['this code', here], ...(process.env.BASELINE_ROOT ? [['baseline', process.env.BASELINE_ROOT] as [string, string]] : [])]

const sleep = (ms: number) => new Promise<void>((r) => setTimeout(r, ms))

/** RSS of `pid` in MB, from /proc (undefined once it is gone). */
function rssMb(pid: number): number | undefined {
  try {
    const m = /VmRSS:\s+(\d+) kB/.exec(readFileSync(`/proc/${pid}/status`, 'utf8'))
    return m ? Number(m[1]) / 1024 : undefined
  } catch {
    return undefined
  }
}

interface Phase {
  name: string
  probes: number
  failures: number
  maxMs: number
  p99Ms: number
  rssMaxMb: number
  rssEndMb: number
  /** The bare /ping server's longest wait over the same phase: the machine's noise. */
  floorMaxMs: number
}

/** One probe every PROBE_EVERY_MS, one at a time (a stalled probe is one long wait). */
class Prober {
  lat = histogram()
  max = 0
  probes = 0
  failures = 0
  #running = true
  #loop: Promise<void>

  constructor(probe: () => Promise<void>) {
    this.#loop = (async () => {
      while (this.#running) {
        const t0 = performance.now()
        try {
          await probe()
        } catch {
          this.failures++
        }
        const ms = performance.now() - t0
        this.probes++
        this.lat.recordValue(Math.max(1, Math.round(ms * 1000)))
        this.max = Math.max(this.max, ms)
        await sleep(Math.max(0, PROBE_EVERY_MS - ms))
      }
    })()
  }

  reset(): void {
    this.lat.reset()
    this.max = 0
    this.probes = 0
    this.failures = 0
  }

  async stop(): Promise<void> {
    this.#running = false
    await this.#loop
  }
}

/** The target's health probe, the floor's beside it, and the target's RSS, kept per phase. */
class Watch {
  #target: Prober
  #floor: Prober
  #rssMax = 0
  #rss = 0
  #rssTimer: NodeJS.Timeout

  constructor(
    probe: () => Promise<void>,
    floor: () => Promise<void>,
    readonly pid: number,
  ) {
    this.#rssTimer = setInterval(() => this.#sampleRss(), RSS_EVERY_MS)
    this.#target = new Prober(probe)
    this.#floor = new Prober(floor)
  }

  #sampleRss(): void {
    const r = rssMb(this.pid)
    if (r === undefined) return
    this.#rss = r
    this.#rssMax = Math.max(this.#rssMax, r)
  }

  /** What was seen since the last phase ended, as phase `name`; the counts start again. */
  phase(name: string): Phase {
    this.#sampleRss()
    const t = this.#target
    const p = { name, probes: t.probes, failures: t.failures, maxMs: t.max, p99Ms: t.lat.getValueAtPercentile(99) / 1000, rssMaxMb: this.#rssMax, rssEndMb: this.#rss, floorMaxMs: this.#floor.max }
    t.reset()
    this.#floor.reset()
    this.#rssMax = this.#rss
    return p
  }

  async stop(): Promise<void> {
    clearInterval(this.#rssTimer)
    await Promise.all([this.#target.stop(), this.#floor.stop()])
  }
}

/** Warm-up (discarded), idle, the attack, after: the phases of one target. */
async function phases(watch: Watch, attack: () => Promise<string>): Promise<{ phases: Phase[]; outcome: string }> {
  await sleep(WARMUP_S * 1000)
  watch.phase('warm-up')
  await sleep(IDLE_S * 1000)
  const idle = watch.phase('idle')
  const outcome = await attack()
  const during = watch.phase('attack')
  await sleep(AFTER_S * 1000)
  const after = watch.phase('after')
  await watch.stop()
  return { phases: [idle, during, after], outcome }
}

function report(title: string, r: { phases: Phase[]; outcome: string }): void {
  const [idle, during, after] = r.phases as [Phase, Phase, Phase]
  console.log(`\n${title}`)
  console.log(`  outcome: ${r.outcome}`)
  for (const p of r.phases) {
    console.log(`  ${p.name.padEnd(7)} health probes ${String(p.probes).padStart(5)} (failed ${p.failures}), longest ${p.maxMs.toFixed(1).padStart(7)} ms, p99 ${p.p99Ms.toFixed(1).padStart(6)} ms (bare server's longest ${p.floorMaxMs.toFixed(1).padStart(6)} ms); RSS peak ${p.rssMaxMb.toFixed(0).padStart(5)} MB, at its end ${p.rssEndMb.toFixed(0).padStart(5)} MB`)
  }
  console.log(`  longest wait, attack / idle: ${(during.maxMs / Math.max(idle.maxMs, 0.001)).toFixed(1)}×; RSS peak over idle: +${(during.rssMaxMb - idle.rssMaxMb).toFixed(0)} MB; after the attack: ${after.rssEndMb.toFixed(0)} MB`)
  console.log(`  target (longest wait under 100 ms throughout): ${during.maxMs < 100 && after.maxMs < 100 ? 'met' : `NOT met (the bare server's longest in the same phases: ${Math.max(during.floorMaxMs, after.floorMaxMs).toFixed(1)} ms)`}`)
}

/** A port nothing listens on. */
async function deadPort(): Promise<number> {
  const s = net.createServer()
  await new Promise<void>((r) => s.listen(0, '127.0.0.1', r))
  const port = (s.address() as net.AddressInfo).port
  await new Promise((r) => s.close(r))
  return port
}

/** A metric's value on the admin port: the series with `labels` (as written), else the first. */
async function gauge(adminUrl: string, name: string, labels = ''): Promise<string> {
  try {
    const text = await (await fetch(`${adminUrl}/metrics`, { signal: AbortSignal.timeout(10_000) })).text()
    const series = labels === '' ? '(?:\\{[^}]*\\})?' : `\\{${labels}\\}`
    return new RegExp(`^${name}${series} (\\S+)$`, 'm').exec(text)?.[1] ?? '0'
  } catch (err) {
    return `unread (${(err as Error).message})`
  }
}

let floorProbe: () => Promise<void> = async () => undefined

async function main(): Promise<void> {
  console.log(`hostile peers: ${machine()}`)
  const floor = await startNodeScript(['bench/peers/ping-floor.mjs'])
  const floorClient = new Client(`http://127.0.0.1:${floor.match[1]}`, { pipelining: 0 })
  floorProbe = async () => {
    const r = await floorClient.request({ method: 'GET', path: '/ping' })
    await r.body.dump()
  }
  console.log(`load average at the start: ${loadavg().map((x) => x.toFixed(1)).join(' ')} (other work on the machine; the bare server's waits show what it costs any process)`)
  console.log(`probes every ${PROBE_EVERY_MS} ms, one at a time; RSS every ${RSS_EVERY_MS} ms; warm-up ${WARMUP_S} s (discarded), idle ${IDLE_S} s, after ${AFTER_S} s`)
  for (const [label, root] of roots) {
    if (ONLY === undefined || ONLY === 'epp') for (const manner of ['polite', 'rude'] as const) await epp(label, root, manner)
    if (ONLY === undefined || ONLY === 'tokenize') await tokenize(label, root)
  }
  await floorClient.close()
  await stopStarted()
}

/** The picker under bodiless streams; the outcome is the attacker's counts and the picker's stream gauge near the attack's end. */
async function epp(label: string, root: string, manner: 'polite' | 'rude'): Promise<void> {
  const pod = await startNodeScript(['bench/stub-upstream.mjs'])
  const epp = await startProcess(
    process.execPath,
    [`${root}/dist/cli.js`, 'epp', '--upstream', `http://127.0.0.1:${pod.match[1]}`, '--grpc-host', '127.0.0.1', '--grpc-port', '0', '--grpc-tls', 'off', '--grpc-health-port', '0', '--admin-port', '0', '--log-level', 'warn'],
    /on grpc:\/\/([\d.:]+) \(.*?health in plaintext on grpc:\/\/([\d.:]+); admin (http:\/\/[\d.:]+)\)/,
    'stderr',
    { cwd: here },
  )
  const [, grpcAddress, healthAddress, adminUrl] = epp.match as unknown as [string, string, string, string]
  // eslint-disable-next-line @typescript-eslint/no-explicit-any
  const client: any = new (healthService())(healthAddress, credentials.createInsecure())
  const probe = () =>
    new Promise<void>((resolve, reject) =>
      client.Check({ service: 'readiness' }, { deadline: Date.now() + 30_000 }, (err: Error | null, r: { status: string }) => (err ? reject(err) : r.status === 'SERVING' ? resolve() : reject(new Error(r.status)))),
    )
  const watch = new Watch(probe, floorProbe, epp.pid)
  try {
    const r = await phases(watch, async () => {
      const attacker = startProcess(process.execPath, ['bench/peers/bodiless-streams.mjs', grpcAddress, String(STREAMS), String(ATTACK_S), manner], /^(\{.*\})\n/m, 'stdout', { cwd: here }, (ATTACK_S + 60) * 1000)
      // The picker's open streams a second before the attacker lets go.
      await sleep((ATTACK_S - 1) * 1000)
      const held = await gauge(adminUrl, 'prefix_router_epp_streams')
      const timedOut = await gauge(adminUrl, 'prefix_router_epp_streams_ended_total', 'how="immediate"')
      const counts = (await attacker).match[1]!
      return `attacker ${counts}; streams the picker held near the end: ${held}, answered 408 by then: ${timedOut}`
    })
    report(`${label}: ${STREAMS} bodiless picker streams on one connection, ${manner}, for ${ATTACK_S} s`, r)
  } finally {
    await watch.stop()
    client.close()
    await epp.stop()
    await pod.stop()
  }
}

/** serve's remote tokenizer under 20 MB /tokenize answers; the outcome is the chats' statuses, what the pod sent, and the tokenizer's last fallback. */
async function tokenize(label: string, root: string): Promise<void> {
  const pod = await startNodeScript(['bench/peers/hostile-tokenize.mjs'])
  const podUrl = `http://127.0.0.1:${pod.match[1]}`
  const serve = await startProcess(
    process.execPath,
    [`${root}/dist/cli.js`, 'serve', '--upstream', podUrl, '--kv-events-port', String(await deadPort()), '--tokenizer', 'remote', '--tokenizer-timeout-ms', '5000', '--host', '127.0.0.1', '--port', '0', '--admin-port', '0', '--log-level', 'warn', '--warmup-requests', '0'],
    /on (http:\/\/[\d.:]+) \(admin (http:\/\/[\d.:]+)/,
    'stderr',
    { cwd: here },
  )
  const [, url, adminUrl] = serve.match as unknown as [string, string, string]
  const ping = new Client(url, { pipelining: 0 })
  const probe = async () => {
    const r = await ping.request({ method: 'GET', path: '/ping', headersTimeout: 30_000, bodyTimeout: 30_000 })
    await r.body.dump()
    if (r.statusCode !== 200) throw new Error(String(r.statusCode))
  }
  const watch = new Watch(probe, floorProbe, serve.pid)
  const chats = new Pool(url, { connections: TOKENIZE_CONCURRENCY })
  try {
    const r = await phases(watch, async () => {
      const statuses = new Map<number, number>()
      let next = 0
      const t0 = performance.now()
      await Promise.all(
        Array.from({ length: TOKENIZE_CONCURRENCY }, async () => {
          while (next < TOKENIZE_REQUESTS) {
            const i = next++
            const res = await chats.request({ method: 'POST', path: '/v1/chat/completions', headers: { 'content-type': 'application/json' }, body: JSON.stringify({ model: 'm', messages: [{ role: 'user', content: `a short question ${i}` }], max_tokens: 2 }), headersTimeout: 60_000, bodyTimeout: 60_000 })
            await res.body.dump()
            statuses.set(res.statusCode, (statuses.get(res.statusCode) ?? 0) + 1)
          }
        }),
      )
      const seconds = (performance.now() - t0) / 1000
      const sent = (await (await fetch(`${podUrl}/stats`)).json()) as { tokenizeCalls: number; bytesSent: number; answerBytes: number }
      const report = (await (await fetch(`${adminUrl}/admin/instances`)).json()) as { endpoints: { tokenizer?: { lastFailure: string | null; fallbacks?: Record<string, number> } | null }[] }
      const t = report.endpoints[0]?.tokenizer
      return `${TOKENIZE_REQUESTS} chats in ${seconds.toFixed(1)} s, statuses ${JSON.stringify(Object.fromEntries(statuses))}; the pod was asked ${sent.tokenizeCalls} times and wrote ${(sent.bytesSent / 1e6).toFixed(1)} MB of answers of ${(sent.answerBytes / 1e6).toFixed(1)} MB each (its socket's buffers included); the tokenizer: ${t === undefined ? 'not shown in /admin/instances' : JSON.stringify({ fallbacks: t?.fallbacks, lastFailure: t?.lastFailure })}`
    })
    report(`${label}: ${TOKENIZE_REQUESTS} chats whose /tokenize answers are 10M ids (20 MB, chunked), ${TOKENIZE_CONCURRENCY} at a time, --tokenizer-timeout-ms 5000`, r)
  } finally {
    await watch.stop()
    await ping.close()
    await chats.close()
    await serve.stop()
    await pod.stop()
  }
}

await main()
