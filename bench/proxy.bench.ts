// Router overhead: the same open-loop load sent straight to a fast stub upstream and through
// `prefix-router serve` in front of it, side by side in one run, with reference proxies on the
// same load: node-floor (bench/peers/node-floor.mjs: Node's HTTP server and undici with none of
// the router's work, the floor for anything built on Node's HTTP stack) and HAProxy and nginx
// when installed (what one extra hop costs on this machine). Every router figure is printed
// as a ratio to node-floor's and HAProxy's from this run, which is what carries from one
// machine to another; the absolute numbers do not.
//
// Open loop: requests are sent on a fixed timer schedule whatever the responses do; latency runs
// from the actual send to the first and to the last response byte, in HDR histograms (how late
// sends ran against the schedule is printed, so a saturated generator shows). Each path's
// first turn is discarded (JIT, connections), then the paths take ROUNDS turns, each in
// quarter-second slots in rotation (every other slot in the reverse order), so that the noise of
// a shared machine falls on all alike. h1 rows are compared with h1 direct,
// h2c rows with h2c direct (the stub speaking h2c). Then per path: the highest rate it sustains
// (closed loop), the CPU time it spends per request (from /proc, summed over the process and
// its workers), and the routing decision alone, in process, over rotating keys.
// With `serve --workers` (detected from `serve --help`) the router also runs as WORKERS
// processes, against node-floor with as many.
// Run: npm run bench:proxy   (RATE=1000 DURATION_S=5 ROUNDS=5 WORKERS=2 CPU_REQUESTS=20000 CPU_ROUNDS=4)
import { execFileSync } from 'node:child_process'
import http2 from 'node:http2'
import { fileURLToPath } from 'node:url'
import type * as hdr from 'hdr-histogram-js'
import { nativeRequest, type ExtractedKey } from '../src/core/key/native-key.js'
import { Router } from '../src/core/router.js'
import { SLOT_S, closedLoop, cpuTurns, h1Sender, histogram, machine, median, pad, ratio, rotate, sample, startNodeScript, startServe, stopStarted, times, us, type Sample, type Sender, type Started } from './harness.js'
import { startCProxies } from './peers/c-proxies.js'

const RATE = Number(process.env.RATE ?? 1000)
const DURATION_S = Number(process.env.DURATION_S ?? 5)
const ROUNDS = Number(process.env.ROUNDS ?? 5)
const WORKERS = Number(process.env.WORKERS ?? 2)
const CPU_REQUESTS = Number(process.env.CPU_REQUESTS ?? 20_000)
// The CPU figure's requests are sent in this many turns, the proxies taking them in rotation, and
// the median turn is printed: on a shared machine, a burst of someone else's work then spoils
// one turn of one proxy rather than that proxy's whole figure.
const CPU_ROUNDS = Number(process.env.CPU_ROUNDS ?? 4)
const root = fileURLToPath(new URL('..', import.meta.url))
const peerChildren: { kill(signal: NodeJS.Signals): boolean }[] = []

function h2Sender(url: string): Sender {
  const session = http2.connect(url)
  return {
    send(b) {
      return new Promise((resolve, reject) => {
        const s = session.request({ ':method': 'POST', ':path': '/v1/chat/completions', 'content-type': 'application/json' })
        let first = 0n
        let status = 0
        s.on('response', (h) => (status = Number(h[':status'])))
        s.on('data', () => {
          if (first === 0n) first = process.hrtime.bigint()
        })
        s.on('end', () => (status === 200 ? resolve({ first, last: process.hrtime.bigint() }) : reject(new Error(`status ${status}`))))
        s.on('error', reject)
        s.end(b)
      })
    },
    close: async () => {
      session.close()
    },
  }
}

/** The same load through every path (see rotate), each path's turns into one sample. */
async function compare(paths: [string, Sender][], stream: boolean): Promise<Record<string, Sample>> {
  const out: Record<string, Sample> = {}
  for (const [name] of paths) out[name] = sample()
  await rotate(paths, stream, { rate: RATE, turn: DURATION_S / ROUNDS, rounds: ROUNDS, alternate: true }, (name) => out[name]!)
  return out
}

/** Whether this build of serve runs worker processes (the flag arrives with a later change). */
function serveHasWorkers(): boolean {
  const help = execFileSync(process.execPath, ['dist/cli.js', 'serve', '--help'], { cwd: root, encoding: 'utf8' })
  return /--workers\b/.test(help)
}

interface Path {
  name: string
  url: string
  /** The process tree whose CPU is the proxy's; none for the direct path. */
  pid?: number
}

async function main(): Promise<void> {
  const stub = await startNodeScript(['bench/stub-upstream.mjs'])
  const stubH2c = await startNodeScript(['bench/stub-upstream.mjs', '--h2c'])
  const upstream = `http://127.0.0.1:${stub.match[1]}`
  const router = await startServe(upstream, 1)
  const floor = await startNodeScript(['bench/peers/node-floor.mjs', upstream, '1'])
  const { peers, skipped } = await startCProxies(upstream)
  for (const p of peers) peerChildren.push(p.child)
  const multi = serveHasWorkers()
  const routerN = multi ? await startServe(upstream, WORKERS) : undefined
  const floorN = multi ? await startNodeScript(['bench/peers/node-floor.mjs', upstream, String(WORKERS)]) : undefined

  const local = (p: Started) => `http://127.0.0.1:${p.match[1]}`
  const h1Paths: Path[] = [
    { name: 'direct', url: upstream },
    { name: 'router', url: router.match[1]!, pid: router.pid },
    { name: 'node-floor', url: local(floor), pid: floor.pid },
    ...peers.map((p) => ({ name: p.name, url: p.url, pid: p.child.pid! })),
    ...(routerN && floorN ? [{ name: `router-w${WORKERS}`, url: routerN.match[1]!, pid: routerN.pid }, { name: `node-floor-w${WORKERS}`, url: local(floorN), pid: floorN.pid }] : []),
  ]
  const h2cPaths: Path[] = [
    { name: 'direct', url: local(stubH2c) },
    { name: 'router', url: router.match[1]!, pid: router.pid },
  ]

  console.log(`prefix-router proxy overhead — ${machine()}`)
  console.log('note: the load generator, the stub and the proxy measured all share these CPUs: every figure includes their contention, the ratios less so')
  console.log(`open loop ${RATE} req/s for ${DURATION_S} s per path and row (${ROUNDS} turns, each in slots of ${SLOT_S} s taken in rotation, after a discarded first turn), 8 KiB chat bodies`)
  console.log(`stub upstream ${upstream} (h2c stub for the h2c rows' direct path); router: serve, prefix_aware, separate process`)
  console.log(`peers: node-floor (Node HTTP server + undici, no routing work)${peers.map((p) => `, ${p.name}`).join('')}${skipped.length ? `; skipped: ${skipped.join(', ')}` : ''}`)
  console.log(multi ? `multi-process: serve --workers ${WORKERS} against node-floor as ${WORKERS} node:cluster workers` : `skipped: serve has no --workers (this build's serve --help does not list it): no multi-process rows`)
  console.log(`\n${pad('client / response', 20)}${pad('path', 16)}${pad('TTFB p50', 11)}${pad('p99', 11)}${pad('p99.9', 11)}${pad('last p50', 11)}${pad('p99', 11)}errors`)

  interface Added {
    row: string
    path: string
    p50: number
    p99: number
    p999: number
  }
  const added: Added[] = []
  for (const proto of ['h1', 'h2c'] as const) {
    for (const stream of [false, true]) {
      const row = `${proto} / ${stream ? 'SSE' : 'JSON'}`
      const paths = proto === 'h1' ? h1Paths : h2cPaths
      const senders = paths.map((p): [string, Sender] => [p.name, proto === 'h2c' ? h2Sender(p.url) : h1Sender(p.url)])
      const rows = await compare(senders, stream)
      for (const [, sender] of senders) await sender.close()
      for (const { name } of paths) {
        const r = rows[name]!
        const at = (h: hdr.Histogram, p: number) => pad(us(h.getValueAtPercentile(p)), 11)
        console.log(`${pad(row, 20)}${pad(name, 16)}${at(r.ttfb, 50)}${at(r.ttfb, 99)}${at(r.ttfb, 99.9)}${at(r.total, 50)}${at(r.total, 99)}${r.errors}`)
      }
      console.log(`${pad('', 20)}send lag behind schedule (router row) p50 ${us(rows.router!.lag.getValueAtPercentile(50))}, p99 ${us(rows.router!.lag.getValueAtPercentile(99))}`)
      const d = rows.direct!.ttfb
      for (const { name } of paths.slice(1)) {
        const r = rows[name]!.ttfb
        const add = (p: number) => r.getValueAtPercentile(p) - d.getValueAtPercentile(p)
        added.push({ row, path: name, p50: add(50), p99: add(99), p999: add(99.9) })
      }
    }
  }
  const find = (row: string, path: string) => added.find((a) => a.row === row && a.path === path)
  console.log('\nadded latency to first byte (path − direct of the same protocol, same run), and the router as a ratio to the peers:')
  for (const a of added) {
    const vs = (peer: string) => {
      const p = find(a.row, peer)
      return p ? `  ×${peer} p50 ${times(ratio(a.p50, p.p50))} p99 ${times(ratio(a.p99, p.p99))}` : ''
    }
    const peerOf = a.path.startsWith('router-w') ? `node-floor-w${WORKERS}` : 'node-floor'
    const ratios = a.path.startsWith('router') ? `${vs(peerOf)}${a.path === 'router' ? vs('haproxy') : ''}` : ''
    console.log(`  ${pad(a.row, 12)}${pad(a.path, 16)}added p50 ${pad(us(a.p50), 10)} p99 ${pad(us(a.p99), 10)} p99.9 ${pad(us(a.p999), 10)}${ratios}`)
  }

  // Throughput and CPU per request, HTTP/1.1 JSON: every proxy in front of the same stub.
  const proxies = h1Paths
  console.log(`\nhighest sustained rate (closed loop, 64 outstanding, 3 s, after 1 s discarded) and proxy CPU time per request (${CPU_REQUESTS.toLocaleString('en-US')} requests in ${CPU_ROUNDS} turns taken in rotation, median turn, user + system of the process and its workers, from /proc), HTTP/1.1 JSON:`)
  const perf: Record<string, { rate: number; cpuUs: number | undefined }> = {}
  // Each proxy keeps its connections from the rate run: the CPU turns count requests, not connecting.
  const warm = new Map<string, Sender>()
  for (const p of proxies) {
    const sender = h1Sender(p.url)
    await closedLoop(sender, 64, { seconds: 1 })
    const r = await closedLoop(sender, 64, { seconds: 3 })
    warm.set(p.name, sender)
    perf[p.name] = { rate: r.done / r.seconds, cpuUs: undefined }
  }
  const turns = await cpuTurns(
    proxies.map((p) => ({ name: p.name, pid: p.pid, sender: warm.get(p.name)! })),
    CPU_REQUESTS,
    CPU_ROUNDS,
  )
  for (const sender of warm.values()) await sender.close()
  for (const p of proxies) {
    const t = turns[p.name]
    if (t !== undefined && t.length > 0) perf[p.name]!.cpuUs = median(t)
    const cpu = perf[p.name]!.cpuUs
    const spread = t && t.length > 1 ? ` (turns ${Math.min(...t).toFixed(0)}–${Math.max(...t).toFixed(0)})` : ''
    console.log(`  ${pad(p.name, 16)}${pad(`${Math.round(perf[p.name]!.rate).toLocaleString('en-US')} req/s`, 14)}${p.pid === undefined ? '(no proxy)' : cpu === undefined ? 'CPU: no /proc' : `${cpu.toFixed(0)} µs CPU per request${spread}`}`)
  }
  const routerRows = Object.keys(perf).filter((n) => n.startsWith('router'))
  for (const name of routerRows) {
    const peer = name === 'router' ? 'node-floor' : `node-floor-w${WORKERS}`
    const r = perf[name]!
    const against = (p: string) => (perf[p] ? `×${p}: rate ${times(ratio(r.rate, perf[p]!.rate))}, CPU ${times(ratio(r.cpuUs, perf[p]!.cpuUs))}` : '')
    console.log(`  ${pad(name, 16)}${[against(peer), name === 'router' ? against('haproxy') : ''].filter(Boolean).join('; ')}`)
  }

  // The routing decision alone, in this process: extract the key from an 8 KiB body as serve
  // does (natively), then pick, over keys that rotate (a single key would sit in every cache on
  // the way).
  const decider = new Router({ instances: Array.from({ length: 7 }, (_, i) => ({ id: `http://10.0.0.${i}:8000` })) })
  const KEYS = 4096
  const prompt = (i: number) => `Assistant ${i}. ${'Answer from the policy below, citing its sections. '.repeat(160)}`.slice(0, 7900)
  const bodies = Array.from({ length: KEYS }, (_, i) => Buffer.from(JSON.stringify({ model: 'stub', messages: [{ role: 'system', content: prompt(i) }, { role: 'user', content: `q${i}` }] })))
  const extract = (b: Buffer): ExtractedKey => {
    const r = nativeRequest('chat', b, { span: 4096, prefixLength: 4096, maxDepth: 64 })
    if (r.status !== 'ok') throw new Error(`native extraction declined a bench body: ${r.status}`)
    return r.request.key
  }
  const keys = bodies.map(extract)
  const pickH = histogram()
  const extractH = histogram()
  for (let i = 0; i < 20_000; i++) decider.pick(keys[i % KEYS]!).release() // discarded: JIT
  for (let i = 0; i < 200_000; i++) {
    const key = keys[(i * 7919) % KEYS]!
    const a = process.hrtime.bigint()
    decider.pick(key).release()
    pickH.recordValue(Math.max(1, Number(process.hrtime.bigint() - a) / 1000))
    if (i % 10 === 0) {
      const c = process.hrtime.bigint()
      extract(bodies[i % KEYS]!)
      extractH.recordValue(Math.max(1, Number(process.hrtime.bigint() - c) / 1000))
    }
  }
  decider.close()
  const pickP99 = pickH.getValueAtPercentile(99)
  console.log(`\nrouting decision (pick + release over ${KEYS} rotating 4096-character keys, 7 instances, µs resolution): p50 ${us(pickH.getValueAtPercentile(50))}, p99 ${us(pickP99)}, p99.9 ${us(pickH.getValueAtPercentile(99.9))}`)
  console.log(`key extraction from an 8 KiB body (native, as serve does): p50 ${us(extractH.getValueAtPercentile(50))}, p99 ${us(extractH.getValueAtPercentile(99))}`)

  // What this run says against each target.
  // Undefined: the peer's added latency was at or below zero in this run, so no ratio decides it.
  const verdict = (v: number | undefined, limit: number) => (v === undefined ? 'undecided (the baseline added nothing measurable in this run)' : v <= limit ? 'met' : 'MISSED')
  console.log('\nsummary: targets, and whether this run met them')
  for (const row of ['h1 / JSON', 'h1 / SSE']) {
    const r = find(row, 'router')!
    const f = find(row, 'node-floor')!
    const p50 = ratio(r.p50, f.p50)
    const p99 = ratio(r.p99, f.p99)
    console.log(`  ${pad(row, 10)} router added p50 ≤ 1.15 × node-floor's: ${times(p50)} — ${verdict(p50, 1.15)};  added p99 ≤ 1.5 × node-floor's: ${times(p99)} — ${verdict(p99, 1.5)}`)
  }
  const wN = perf[`router-w${WORKERS}`]
  const cpuRatio = ratio(wN?.cpuUs, perf.router!.cpuUs)
  console.log(
    multi
      ? `  CPU per request with --workers ${WORKERS} ≤ 1.1 × with 1 worker: ${times(cpuRatio)} — ${verdict(cpuRatio, 1.1)}`
      : '  CPU per request with --workers 2 ≤ 1.1 × with 1 worker: skipped (serve has no --workers)',
  )
  console.log(`  routing decision p99 < 20 µs over rotating keys: ${us(pickP99)} — ${pickP99 < 20 ? 'met' : 'MISSED'}`)
  console.log("  fresh process first-second p50 ≤ 2 × steady p50: not in this run; measured by npm run bench:cold")

  // Ready to paste into README.md's overhead section.
  console.log(`\nmarkdown (${machine()}):\n`)
  console.log('| Row | Router added TTFB p50 | p99 | × node-floor p50 | × node-floor p99 | × HAProxy p50 | × HAProxy p99 |')
  console.log('| --- | --- | --- | --- | --- | --- | --- |')
  for (const a of added.filter((x) => x.path.startsWith('router'))) {
    const f = find(a.row, a.path === 'router' ? 'node-floor' : `node-floor-w${WORKERS}`)
    const h = a.path === 'router' ? find(a.row, 'haproxy') : undefined
    console.log(`| ${a.row}${a.path === 'router' ? '' : ` (--workers ${WORKERS})`} | ${us(a.p50)} | ${us(a.p99)} | ${times(ratio(a.p50, f?.p50))} | ${times(ratio(a.p99, f?.p99))} | ${times(ratio(a.p50, h?.p50))} | ${times(ratio(a.p99, h?.p99))} |`)
  }
  console.log('\n| Processes | Router max rate | × node-floor | × HAProxy | Router CPU per request | × node-floor | × HAProxy |')
  console.log('| --- | --- | --- | --- | --- | --- | --- |')
  for (const name of routerRows) {
    const r = perf[name]!
    const f = perf[name === 'router' ? 'node-floor' : `node-floor-w${WORKERS}`]
    const h = name === 'router' ? perf.haproxy : undefined
    console.log(`| ${name === 'router' ? '1' : WORKERS} | ${Math.round(r.rate).toLocaleString('en-US')} req/s | ${times(ratio(r.rate, f?.rate))} | ${times(ratio(r.rate, h?.rate))} | ${r.cpuUs === undefined ? 'n/a' : `${r.cpuUs.toFixed(0)} µs`} | ${times(ratio(r.cpuUs, f?.cpuUs))} | ${times(ratio(r.cpuUs, h?.cpuUs))} |`)
  }
}

main()
  .catch((err: unknown) => {
    console.error(err)
    process.exitCode = 1
  })
  .finally(async () => {
    for (const c of peerChildren) c.kill('SIGTERM')
    await stopStarted()
  })
