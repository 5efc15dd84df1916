// What a correct prefix router must cost above node-floor, and what is this router's own: the
// same open-loop load as bench:proxy (8 KiB chat bodies, HTTP/1.1, JSON and SSE answers) sent
// straight to the stub upstream, through node-floor, through each level of
// bench/peers/node-proxy.mjs (node-floor's proxy plus, cumulatively, RFC 9110 header handling,
// the library's routing key and pick, and serve's per-request metrics), and through `serve`.
// The top level does all the work a correct router must do per request on Node's HTTP stack:
// what it adds above node-floor is the price of that work, what the router adds above it is
// the router's own.
//
// Each path's first turn is discarded (the JIT, the connections), then the paths take ROUNDS
// turns, each in quarter-second slots in rotation, every other slot in the reverse order, so that
// other work on a shared machine, a burst or a load that grows through the run, falls on all
// alike. Every round gives each path's added latency to first byte (its p50 and p99 less direct's in that
// round) and its ratios to the level below and to node-floor; the figures printed are the
// medians over the rounds, and each proxy's CPU time per request over its measured slots (at
// RATE, each request meeting an idle proxy). On the JSON row the stub stamps when it had the
// whole request (stub-upstream.mjs --stamp), which splits what each path adds into the request's
// way to the stub and the answer's way back. Then each proxy's CPU time per request in a closed
// loop, as bench:proxy takes it.
// Run: npm run bench:ladder   (RATE=1000 DURATION_S=10 ROUNDS=5 CPU_REQUESTS=20000 CPU_ROUNDS=4
// PATHS=public; PATHS=serve runs the route and metrics levels on serve's own key extraction
// and metrics instead of the package's exports)
import { SLOT_S, closedLoop, cpuTurns, treeCpuMs, h1Sender, machine, median, pad, ratio, rotate, sample, startNodeScript, startServe, stopStarted, times, us, type Sample, type Sender, type Started } from './harness.js'

const RATE = Number(process.env.RATE ?? 1000)
const DURATION_S = Number(process.env.DURATION_S ?? 10)
const ROUNDS = Number(process.env.ROUNDS ?? 5)
const CPU_REQUESTS = Number(process.env.CPU_REQUESTS ?? 20_000)
const CPU_ROUNDS = Number(process.env.CPU_ROUNDS ?? 4)
const PATHS = process.env.PATHS ?? 'public'
// Requests per proxy discarded before the CPU turns: the first few thousand of a closed loop on
// 64 connections cost more (measured on fresh proxies: after 2,000 discarded, the first turn of
// 5,000 cost 1.4-1.9x the later ones).
const CPU_WARM = 5000
for (const [name, v] of Object.entries({ RATE, DURATION_S, ROUNDS, CPU_REQUESTS, CPU_ROUNDS })) {
  if (!(v > 0) || !Number.isFinite(v)) throw new Error(`${name} must be a positive number, not ${JSON.stringify(process.env[name])}`)
}
if (PATHS !== 'public' && PATHS !== 'serve') throw new Error(`PATHS must be public or serve, not ${JSON.stringify(PATHS)}`)

const LEVELS = ['floor', 'headers', 'route', 'metrics'] as const
/** Each proxy, in ladder order: every one is compared with the one before it. */
const LADDER = ['node-floor', ...LEVELS, 'router'] as const

interface Path {
  name: string
  url: string
  /** The process tree whose CPU is the proxy's; none for the direct path. */
  pid?: number
}

interface Added {
  p50: number
  p99: number
}

/** Median of the rounds' values that exist, with how many did (a ratio to a baseline at or below zero does not). */
function middle(xs: readonly (number | undefined)[]): { value: number | undefined; of: number } {
  const have = xs.filter((x): x is number => x !== undefined)
  return { value: median(have), of: have.length }
}

const shown = (m: { value: number | undefined; of: number }, n: number, f: (v: number) => string) =>
  m.value === undefined ? 'n/a' : `${f(m.value)}${m.of < n ? ` (${m.of}/${n})` : ''}`

async function main(): Promise<void> {
  // --stamp: JSON answers say when the stub had the whole request, which splits each path's added latency in two.
  const stub = await startNodeScript(['bench/stub-upstream.mjs', '--stamp'])
  const upstream = `http://127.0.0.1:${stub.match[1]}`
  const local = (port: string | undefined) => `http://127.0.0.1:${port}`
  const floor = await startNodeScript(['bench/peers/node-floor.mjs', upstream, '1'])
  const levels: Started[] = []
  for (const level of LEVELS) levels.push(await startNodeScript(['bench/peers/node-proxy.mjs', upstream, level], { PATHS }))
  const router = await startServe(upstream, 1)
  const paths: Path[] = [
    { name: 'direct', url: upstream },
    { name: 'node-floor', url: local(floor.match[1]), pid: floor.pid },
    ...LEVELS.map((name, i) => ({ name, url: local(levels[i]!.match[1]), pid: levels[i]!.pid })),
    { name: 'router', url: router.match[1]!, pid: router.pid },
  ]

  console.log(`prefix-router ablation ladder — ${machine()}`)
  console.log('note: the load generator, the stub and the proxy measured all share these CPUs: every figure includes their contention, the ratios less so')
  console.log(`open loop ${RATE} req/s, 8 KiB chat bodies, HTTP/1.1; per path and row a discarded turn, then ${ROUNDS} turns of ${+(DURATION_S / ROUNDS).toFixed(2)} s, each in slots of ${SLOT_S} s in rotation (every other one reversed); figures are medians over the turns`)
  console.log('levels (bench/peers/node-proxy.mjs, each with everything above it):')
  console.log('  floor    node-floor.mjs itself in a second process: its ratio to node-floor is the run\'s noise')
  console.log('  headers  + every end-to-end header both ways, hop-by-hop and Host dropped, X-Forwarded-For/-Proto/-Host, X-Request-Id')
  console.log(
    `  route    + route by path, routing key, Router.pick among 4 instances, release at the end (${PATHS === 'public' ? 'PATHS=public: routingKey() from dist/index.js, JSON.parse' : "PATHS=serve: serve's native key extraction, not a public export"})`,
  )
  console.log(`  metrics  + requests counter, decision, upstream TTFB and duration histograms (${PATHS === 'public' ? "prom-client's Counter and Histogram" : "serve's bound metrics"}, serve's names, labels, buckets)`)
  console.log('  router   prefix-router serve, prefix_aware, --log-level warn')

  const stepsHead = `${pad('÷ below p50', 15)}${pad('Δ p50', 12)}${pad('÷ below p99', 15)}`
  for (const stream of [false, true]) {
    const row = `h1 / ${stream ? 'SSE' : 'JSON'}`
    const senders = paths.map((p): [string, Sender] => [p.name, h1Sender(p.url, !stream)])
    const turns: Record<string, Sample[]> = {}
    // CPU time over the measured slots, at the row's open-loop rate: each request then comes to
    // an idle proxy, as in production at this rate, where the closed loop below keeps it busy.
    const open: Record<string, { ms: number; requests: number; at: number }> = {}
    const onSlot = (name: string, phase: 'start' | 'end', requests: number) => {
      const pid = paths.find((p) => p.name === name)?.pid
      const ms = pid === undefined ? undefined : treeCpuMs(pid)
      if (ms === undefined) return
      const o = (open[name] ??= { ms: 0, requests: 0, at: 0 })
      if (phase === 'start') o.at = ms
      else {
        o.ms += ms - o.at
        o.requests += requests
      }
    }
    await rotate(senders, stream, { rate: RATE, turn: DURATION_S / ROUNDS, rounds: ROUNDS, alternate: true, onSlot }, (name, r) => ((turns[name] ??= [])[r] ??= sample()))
    for (const [, s] of senders) await s.close()

    const rounds = Array.from({ length: ROUNDS }, (_, r) => r)
    const at = (name: string, r: number, p: number) => turns[name]![r]!.ttfb.getValueAtPercentile(p)
    const added = (name: string, r: number): Added => ({ p50: at(name, r, 50) - at('direct', r, 50), p99: at(name, r, 99) - at('direct', r, 99) })
    console.log(`\n${row}: time to first byte, and what each proxy adds to it (its figure less direct's in the same turn)`)
    console.log(`${pad('path', 12)}${pad('TTFB p50', 10)}${pad('p99', 10)}${pad('added p50', 11)}${pad('added p99', 11)}${pad('× node-floor p50', 18)}${pad('p99', 14)}${stepsHead}errors`)
    for (const { name } of paths) {
      const errors = turns[name]!.reduce((n, s) => n + s.errors, 0)
      const abs = `${pad(us(median(rounds.map((r) => at(name, r, 50)))!), 10)}${pad(us(median(rounds.map((r) => at(name, r, 99)))!), 10)}`
      if (name === 'direct') {
        console.log(`${pad(name, 12)}${abs}${' '.repeat(11 + 11 + 18 + 14 + 15 + 12 + 15)}${errors}`)
        continue
      }
      const a = rounds.map((r) => added(name, r))
      const vsFloor = (p: keyof Added) => middle(rounds.map((r) => ratio(a[r]![p], added('node-floor', r)[p])))
      const below = LADDER[LADDER.indexOf(name as (typeof LADDER)[number]) - 1]
      const step = (p: keyof Added) => (below === undefined ? undefined : middle(rounds.map((r) => ratio(a[r]![p], added(below, r)[p]))))
      const delta = below === undefined ? undefined : median(rounds.map((r) => a[r]!.p50 - added(below, r).p50))
      const s50 = step('p50')
      const s99 = step('p99')
      console.log(
        `${pad(name, 12)}${abs}${pad(us(median(a.map((x) => x.p50))!), 11)}${pad(us(median(a.map((x) => x.p99))!), 11)}` +
          `${pad(name === 'node-floor' ? '—' : shown(vsFloor('p50'), ROUNDS, times), 18)}${pad(name === 'node-floor' ? '—' : shown(vsFloor('p99'), ROUNDS, times), 14)}` +
          `${pad(s50 ? shown(s50, ROUNDS, times) : '—', 15)}${pad(delta === undefined ? '—' : us(delta), 12)}${pad(s99 ? shown(s99, ROUNDS, times) : '—', 15)}${errors}`,
      )
    }
    if (!stream) {
      // The two legs' p50s need not add up to the TTFB's; each is read against direct's and node-floor's as the TTFB is.
      const leg = (name: string, r: number, which: 'there' | 'back') => turns[name]![r]![which].getValueAtPercentile(50) - turns.direct![r]![which].getValueAtPercentile(50)
      const legs = (which: 'there' | 'back') =>
        LADDER.map((name) => {
          const a = median(rounds.map((r) => leg(name, r, which)))!
          const x = middle(rounds.map((r) => ratio(leg(name, r, which), leg('node-floor', r, which))))
          return `${name} ${us(a)}${name === 'node-floor' ? '' : ` (${shown(x, ROUNDS, times)})`}`
        }).join(', ')
      console.log(`where it is added, p50 over direct's (× node-floor): the request's way to the stub (send → the stub has it all): ${legs('there')}`)
      console.log(`  the answer's way back (the stub's stamp → the first byte): ${legs('back')}`)
    }
    const cpuAt = (name: string) => (open[name] && open[name].requests > 0 ? (open[name].ms * 1000) / open[name].requests : undefined)
    if (cpuAt('node-floor') !== undefined) {
      const each = LADDER.map((name) => `${name} ${us(cpuAt(name) ?? NaN)}${name === 'node-floor' ? '' : ` (${times(ratio(cpuAt(name), cpuAt('node-floor')))})`}`)
      console.log(`CPU per request at ${RATE} req/s (open loop, over the measured slots; × node-floor): ${each.join(', ')}; router ÷ metrics ${times(ratio(cpuAt('router'), cpuAt('metrics')))}`)
    }
    const lag = median(rounds.map((r) => turns.router![r]!.lag.getValueAtPercentile(99)))!
    const noise = middle(rounds.map((r) => ratio(added('floor', r).p50, added('node-floor', r).p50)))
    console.log(`send lag behind schedule (router turns), p99 ${us(lag)}; this run's noise: floor ÷ node-floor p50 ${shown(noise, ROUNDS, times)} (the same program: 1.00× on a quiet machine), a step closer to 1.00× than that says nothing`)
    const must = middle(rounds.map((r) => ratio(added('metrics', r).p50, added('node-floor', r).p50)))
    const own = middle(rounds.map((r) => ratio(added('router', r).p50, added('metrics', r).p50)))
    const all = middle(rounds.map((r) => ratio(added('router', r).p50, added('node-floor', r).p50)))
    console.log(
      `reading: a correct router (metrics level) adds ${shown(must, ROUNDS, times)} node-floor's p50; the router adds ${shown(own, ROUNDS, times)} the metrics level's (its own work), ` +
        `${shown(all, ROUNDS, times)} node-floor's in all (target ≤ 1.15×)`,
    )
  }

  // CPU time per request, HTTP/1.1 JSON, on connections already open and warmed.
  const proxies = paths.filter((p) => p.pid !== undefined)
  const warm = proxies.map((p) => ({ name: p.name, pid: p.pid, sender: h1Sender(p.url) }))
  for (const w of warm) await closedLoop(w.sender, 64, { count: CPU_WARM })
  const cpu = await cpuTurns(warm, CPU_REQUESTS, CPU_ROUNDS, true)
  for (const w of warm) await w.sender.close()
  console.log(`\nproxy CPU time per request, HTTP/1.1 JSON (${CPU_REQUESTS.toLocaleString('en-US')} requests in ${CPU_ROUNDS} turns taken in rotation, every other one reversed, after ${CPU_WARM.toLocaleString('en-US')} discarded, closed loop, 64 outstanding; median turn; user + system, from /proc):`)
  const cpuOf = (name: string) => (cpu[name] ? median(cpu[name]) : undefined)
  for (const { name } of proxies) {
    const t = cpu[name]
    if (t === undefined) {
      console.log(`  ${pad(name, 12)}CPU: no /proc`)
      continue
    }
    const below = LADDER[LADDER.indexOf(name as (typeof LADDER)[number]) - 1]
    const mine = cpuOf(name)!
    const vs = name === 'node-floor' ? '' : `  × node-floor ${times(ratio(mine, cpuOf('node-floor')))}`
    const step = below === undefined ? '' : `  ÷ ${below} ${times(ratio(mine, cpuOf(below)))} (Δ ${us(mine - cpuOf(below)!)})`
    console.log(`  ${pad(name, 12)}${pad(`${mine.toFixed(0)} µs`, 8)}(turns ${Math.min(...t).toFixed(0)}–${Math.max(...t).toFixed(0)})${vs}${step}`)
  }
}

main()
  .catch((err: unknown) => {
    console.error(err)
    process.exitCode = 1
  })
  .finally(stopStarted)
