// The endpoint picker's cost: `prefix-router epp` in a child process in front of two stub pods
// on loopback, driven by a gateway client in this process that speaks ext_proc as Envoy does
// (one gRPC stream per request: request headers, the 8 KiB chat body in one chunk, the header
// mutation back, the body handed back; then the request forwarded to the pod named and its
// answer sent through the stream's response path), against `serve` proxying the same requests
// to the same pods, in the same run, at the same open-loop rate.
//
// Reported:
// - decision latency as the picker sees it: in the gateway client, from writing the last body
//   chunk to receiving the header-mutation response (both ends' gRPC + protobuf, loopback, the
//   body's key read and the pick); and the pick alone, from the picker's own
//   prefix_router_routing_decision_seconds histogram (serve's decision histogram; bucket bounds);
// - CPU per request (user + system, /proc) of the picker process against serve's, as a ratio.
// Run: npm run bench:epp   (RATE=1000 WARMUP_S=2 DURATION_S=6 STRATEGY=longest_prefix; EPP_NODE_FLAGS for the picker's node)
import { credentials, type ClientDuplexStream } from '@grpc/grpc-js'
import { Client } from 'undici'
import type * as hdr from 'hdr-histogram-js'
import { existsSync, mkdtempSync, readFileSync, rmSync } from 'node:fs'
import { tmpdir } from 'node:os'
import { join } from 'node:path'
import { fileURLToPath } from 'node:url'
import { externalProcessor } from '../src/epp/protos.js'
import { DESTINATION } from '../src/epp/messages.js'
import { SLOT_S, h1Sender, histogram, machine, openLoop, pad, ratio, sample, startNodeScript, startProcess, stopStarted, times, treeCpuMs, us, type Sample, type Sender, type Started } from './harness.js'

const RATE = Number(process.env.RATE ?? 1000)
const WARMUP_S = Number(process.env.WARMUP_S ?? 2)
const DURATION_S = Number(process.env.DURATION_S ?? 6)
const root = fileURLToPath(new URL('..', import.meta.url))

type Msg = any

const header = (key: string, value: string) => ({ key, raw_value: Buffer.from(value) })

/** One waiting reader of a stream's answers. */
class Answers {
  #queue: Msg[] = []
  #waiter: ((m: Msg | undefined) => void) | undefined
  #ended = false
  firstAt = 0n
  constructor(call: ClientDuplexStream<Msg, Msg>) {
    call.on('data', (m: Msg) => {
      if (this.firstAt === 0n) this.firstAt = process.hrtime.bigint()
      const w = this.#waiter
      if (w) {
        this.#waiter = undefined
        w(m)
      } else this.#queue.push(m)
    })
    const end = () => {
      this.#ended = true
      const w = this.#waiter
      this.#waiter = undefined
      w?.(undefined)
    }
    call.on('end', end)
    call.on('error', end)
  }
  next(): Promise<Msg | undefined> {
    if (this.#queue.length > 0) return Promise.resolve(this.#queue.shift())
    if (this.#ended) return Promise.resolve(undefined)
    return new Promise((r) => (this.#waiter = r))
  }
}

/**
 * The gateway: each send is one ext_proc stream, as Envoy's filter in FULL_DUPLEX_STREAMED mode
 * drives it, and the HTTP forward to the pod the picker named (a keep-alive pool per pod).
 * `decision` gets, per request, the time from writing the last body chunk to the header mutation.
 */
function gatewaySender(address: string, decision: { h: hdr.Histogram }): Sender & { failures: string[] } {
  const Proc = externalProcessor()
  const client: Msg = new Proc(address, credentials.createInsecure(), { 'grpc.max_concurrent_streams': 1000 })
  const pools = new Map<string, Client>()
  const pool = (hostPort: string) => {
    let c = pools.get(hostPort)
    if (!c) pools.set(hostPort, (c = new Client(`http://${hostPort}`, { connections: 64, pipelining: 1, keepAliveTimeout: 60_000 } as never)))
    return c
  }
  const failures: string[] = []
  const fail = (why: string): never => {
    if (failures.length < 5) failures.push(why)
    throw new Error(why)
  }
  return {
    failures,
    async send(b) {
      const body = Buffer.from(b)
      const call: ClientDuplexStream<Msg, Msg> = client.Process()
      const answers = new Answers(call)
      call.write({ request_headers: { headers: { headers: [header(':method', 'POST'), header(':path', '/v1/chat/completions'), header(':authority', 'gateway'), header('content-type', 'application/json'), header('content-length', String(body.length))] }, end_of_stream: false } })
      const sentBody = process.hrtime.bigint()
      call.write({ request_body: { body, end_of_stream: true } })
      const picked = await answers.next()
      const at = answers.firstAt
      const set = picked?.request_headers?.response?.header_mutation?.set_headers ?? []
      const dest = set.find((o: Msg) => o.header.key === DESTINATION)
      if (!dest) {
        call.cancel()
        return fail(`no destination: ${JSON.stringify(picked)?.slice(0, 200)}`)
      }
      decision.h.recordValue(Math.max(1, Number(at - sentBody) / 1000))
      const back = await answers.next()
      if (!back?.request_body?.response?.body_mutation?.streamed_response?.end_of_stream) fail('the body was not handed back in one chunk')
      const target = Buffer.from(dest.header.raw_value).toString()
      const res = await pool(target).request({ path: '/v1/chat/completions', method: 'POST', body, headers: { 'content-type': 'application/json' } })
      call.write({ response_headers: { headers: { headers: [header(':status', String(res.statusCode)), header('content-type', String(res.headers['content-type'] ?? ''))] }, end_of_stream: false } })
      if ((await answers.next())?.response_headers === undefined) fail('no response_headers answer')
      let first = 0n
      for await (const c of res.body) {
        if (first === 0n) first = process.hrtime.bigint()
        call.write({ response_body: { body: c, end_of_stream: false } })
        if ((await answers.next())?.response_body === undefined) fail('no response_body answer')
      }
      call.write({ response_body: { body: Buffer.alloc(0), end_of_stream: true } })
      if ((await answers.next())?.response_body === undefined) fail('no answer to the end of the response body')
      call.end()
      if ((await answers.next()) !== undefined) fail('the picker answered past the end')
      if (res.statusCode !== 200) fail(`status ${res.statusCode}`)
      return { first, last: process.hrtime.bigint() }
    },
    async close() {
      client.close()
      for (const c of pools.values()) await c.close()
    },
  }
}

/** The routing-decision histogram's cumulative bucket counts (le → count), summed over strategies. */
async function decisionBuckets(adminUrl: string): Promise<Map<number, number>> {
  const text = await (await fetch(`${adminUrl}/metrics`)).text()
  const out = new Map<number, number>()
  for (const m of text.matchAll(/^prefix_router_routing_decision_seconds_bucket\{([^}]*)\} (\d+)/gm)) {
    const le = /le="([^"]+)"/.exec(m[1]!)![1]!
    const k = le === '+Inf' ? Infinity : Number(le)
    out.set(k, (out.get(k) ?? 0) + Number(m[2]))
  }
  return out
}

/** The bucket bound at which percentile p is reached, between two scrapes: "≤ bound". */
function bucketPercentile(before: Map<number, number>, after: Map<number, number>, p: number): { bound: number; n: number } {
  const les = [...after.keys()].sort((a, b) => a - b)
  const n = (after.get(Infinity) ?? 0) - (before.get(Infinity) ?? 0)
  for (const le of les) {
    const c = (after.get(le) ?? 0) - (before.get(le) ?? 0)
    if (c >= (p / 100) * n) return { bound: le, n }
  }
  return { bound: Infinity, n }
}
const boundUs = (s: number) => (s === Infinity ? '> 1 ms' : `≤ ${us(s * 1e6)}`.replace(/ 0 µs$/, ` ${(s * 1e6).toFixed(2)} µs`))

async function main(): Promise<void> {
  const pods = [await startNodeScript(['bench/stub-upstream.mjs']), await startNodeScript(['bench/stub-upstream.mjs'])]
  const upstreams = pods.flatMap((p) => ['--upstream', `http://127.0.0.1:${p.match[1]}`])
  // The floor: grpc-js with the picker's codec and answers, no routing (bench/peers/grpc-floor.mjs).
  const floor = await startNodeScript(['bench/peers/grpc-floor.mjs', `127.0.0.1:${pods[0]!.match[1]}`])
  // A lower floor: the same answers on node:http2 with gRPC's framing by hand, no grpc-js (bench/peers/h2-floor.mjs).
  const h2Floor = await startNodeScript(['bench/peers/h2-floor.mjs', `127.0.0.1:${pods[0]!.match[1]}`])
  const common = ['--initial-old-space-size=128', 'dist/cli.js']
  // STRATEGY: the same for both (default longest_prefix, serve's and epp's own default).
  const strategy = process.env.STRATEGY ?? 'longest_prefix'
  const flags = [...upstreams, '--strategy', strategy, '--admin-port', '0', '--log-level', 'warn']
  const started: Started[] = [floor, h2Floor]
  // The picker's own timing of each decision (bench/epp-timing.mjs), read through a file on SIGUSR2.
  const dir = mkdtempSync(join(tmpdir(), 'epp-bench-'))
  const timingFile = join(dir, 'timing.json')
  // EPP_NODE_FLAGS: node flags for the picker's process only (e.g. "--cpu-prof --cpu-prof-dir=/tmp/epp-prof" to profile it).
  const eppNodeFlags = (process.env.EPP_NODE_FLAGS ?? '').split(' ').filter((f) => f !== '')
  const epp = await startProcess(process.execPath, [...eppNodeFlags, '--import', './bench/epp-timing.mjs', ...common, 'epp', ...flags, '--grpc-host', '127.0.0.1', '--grpc-port', '0', '--grpc-tls', 'off'], /on grpc:\/\/([\d.:]+) \(.*?admin (http:\/\/[\d.:]+)\)/, 'stderr', { cwd: root, env: { ...process.env, EPP_TIMING_FILE: timingFile } })
  const eppTiming = async (): Promise<{ count: number; p50: number; p99: number; p999: number }> => {
    rmSync(timingFile, { force: true })
    process.kill(epp.pid, 'SIGUSR2')
    for (let k = 0; k < 200 && !existsSync(timingFile); k++) await new Promise((r) => setTimeout(r, 10))
    return JSON.parse(readFileSync(timingFile, 'utf8'))
  }
  started.push(epp)
  const serve = await startProcess(process.execPath, [...common, 'serve', ...flags, '--host', '127.0.0.1', '--port', '0'], /on (http:\/\/[\d.:]+) \(admin (http:\/\/[\d.:]+)\)/, 'stderr', { cwd: root })
  started.push(serve)
  const [, grpcAddress, eppAdmin] = epp.match
  const [, serveUrl, serveAdmin] = serve.match

  try {
    console.log(`prefix-router endpoint picker — ${machine()}`)
    console.log('note: the gateway client, the two stub pods, the picker and serve all share these CPUs: every figure includes their contention')
    console.log(`open loop ${RATE} req/s of 8 KiB chat bodies (JSON answers), one ext_proc stream per request (FULL_DUPLEX_STREAMED, body in one chunk); ${WARMUP_S} s per path discarded, then ${DURATION_S} s per path measured in ${SLOT_S} s slots, the four paths in rotation`)
    console.log(`picker: prefix-router epp, ${strategy}, grpc://${grpcAddress} (plaintext: --grpc-tls off); serve: ${serveUrl}; both --upstream ×2 (stub pods), --log-level warn`)

    const gwDecision = { h: histogram() }
    const gw = gatewaySender(grpcAddress!, gwDecision)
    const gwFloor = gatewaySender(`127.0.0.1:${floor.match[1]}`, { h: histogram() })
    const gwH2Floor = gatewaySender(`127.0.0.1:${h2Floor.match[1]}`, { h: histogram() })
    const direct = h1Sender(serveUrl!)
    const paths: [string, Sender][] = [
      ['epp', gw],
      ['serve', direct],
      ['floor', gwFloor],
      ['h2floor', gwH2Floor],
    ]
    // Warm-up, discarded: the JIT of every process, connections, the picker's first streams.
    for (const [, s] of paths) await openLoop(s, false, RATE, WARMUP_S, sample())
    gwDecision.h = histogram()
    await eppTiming()
    const eppBefore = await decisionBuckets(eppAdmin!)
    const serveBefore = await decisionBuckets(serveAdmin!)
    const pids: Record<string, number> = { epp: epp.pid, serve: serve.pid, floor: floor.pid, h2floor: h2Floor.pid }
    const cpu: Record<string, { ms: number; requests: number }> = Object.fromEntries(paths.map(([name]) => [name, { ms: 0, requests: 0 }]))
    const samples: Record<string, Sample> = Object.fromEntries(paths.map(([name]) => [name, sample()]))
    // The measured window: slots of SLOT_S, the paths in rotation (every other slot in the
    // reverse order), so that whatever else the machine does falls on both alike.
    const slots = Math.max(1, Math.round(DURATION_S / SLOT_S))
    for (let k = 0; k < slots; k++) {
      for (const [name, sender] of k % 2 === 1 ? [...paths].reverse() : paths) {
        const before = treeCpuMs(pids[name]!) ?? NaN
        await openLoop(sender, false, RATE, SLOT_S, samples[name]!)
        cpu[name]!.ms += (treeCpuMs(pids[name]!) ?? NaN) - before
        cpu[name]!.requests += Math.round(RATE * SLOT_S)
      }
    }
    const inside = await eppTiming()
    const eppAfter = await decisionBuckets(eppAdmin!)
    const serveAfter = await decisionBuckets(serveAdmin!)
    await gw.close()
    await gwFloor.close()
    await gwH2Floor.close()
    await direct.close()

    const errors = paths.reduce((n, [name]) => n + samples[name]!.errors, 0)
    console.log(`\n${pad('path', 8)}${pad('TTFB p50', 11)}${pad('p99', 11)}${pad('last p50', 11)}${pad('p99', 11)}errors`)
    for (const [name] of paths) {
      const s = samples[name]!
      const at = (h: hdr.Histogram, p: number) => pad(us(h.getValueAtPercentile(p)), 11)
      console.log(`${pad(name, 8)}${at(s.ttfb, 50)}${at(s.ttfb, 99)}${at(s.total, 50)}${at(s.total, 99)}${s.errors}`)
    }
    for (const name of ['epp', 'serve']) console.log(`  ${name}: the load generator's send lag behind schedule p50 ${us(samples[name]!.lag.getValueAtPercentile(50))}, p99 ${us(samples[name]!.lag.getValueAtPercentile(99))} (the gateway client shares this process)`)
    console.log('  (epp: the gateway client\'s whole exchange, stream and forward to the pod; serve: the HTTP request through serve. Not comparable as overhead: Envoy\'s own proxying is not in the epp row)')
    if (gw.failures.length > 0) console.log(`  gateway failures: ${gw.failures.join('; ')}`)
    if (gwFloor.failures.length > 0) console.log(`  gateway failures against the floor: ${gwFloor.failures.join('; ')}`)
    if (gwH2Floor.failures.length > 0) console.log(`  gateway failures against the HTTP/2 floor: ${gwH2Floor.failures.join('; ')}`)

    const h = gwDecision.h
    const dP50 = h.getValueAtPercentile(50)
    const dP99 = h.getValueAtPercentile(99)
    const pickP50 = bucketPercentile(eppBefore, eppAfter, 50)
    const pickP99 = bucketPercentile(eppBefore, eppAfter, 99)
    const sP50 = bucketPercentile(serveBefore, serveAfter, 50)
    const sP99 = bucketPercentile(serveBefore, serveAfter, 99)
    console.log('\ndecision latency:')
    console.log(`  gateway client, last body chunk written → header mutation received (${h.totalCount.toLocaleString('en-US')} streams): p50 ${us(dP50)}, p99 ${us(dP99)}, p99.9 ${us(h.getValueAtPercentile(99.9))}`)
    console.log('    = the client\'s and the picker\'s gRPC + protobuf, HTTP/2 over loopback, the body\'s key read, and the pick')
    console.log(`  in the picker's process, request-body message arriving (deserialized) → header-mutation response handed to grpc-js's write (${inside.count.toLocaleString('en-US')} streams, bench/epp-timing.mjs): p50 ${us(inside.p50)}, p99 ${us(inside.p99)}, p99.9 ${us(inside.p999)}`)
    console.log('    = the body\'s key read, the pick, building the answer, and the picker\'s event-loop queueing; not protobuf or HTTP/2')
    console.log(`  the pick alone, the picker's prefix_router_routing_decision_seconds (${pickP50.n.toLocaleString('en-US')} picks, bucket bounds): p50 ${boundUs(pickP50.bound)}, p99 ${boundUs(pickP99.bound)}`)
    console.log(`  the pick alone in serve, same histogram, same requests (${sP50.n.toLocaleString('en-US')} picks): p50 ${boundUs(sP50.bound)}, p99 ${boundUs(sP99.bound)}`)
    console.log(`  gRPC + protobuf + HTTP/2 both ways (client-timed p50 − in-picker p50): ${us(Math.max(0, dP50 - inside.p50))}; in-picker p50 − the pick's p50 bucket bound (key read, answer, queueing), at least: ${us(Math.max(0, inside.p50 - pickP50.bound * 1e6))}`)

    const per = (name: string) => (cpu[name]!.requests > 0 && Number.isFinite(cpu[name]!.ms) ? (cpu[name]!.ms * 1000) / cpu[name]!.requests : undefined)
    const eppCpu = per('epp')
    const serveCpu = per('serve')
    const cpuRatio = ratio(eppCpu, serveCpu)
    console.log(`\nCPU per request (user + system of the process, /proc, over its measured slots at ${RATE} req/s):`)
    console.log(`  epp   ${eppCpu === undefined ? 'n/a (no /proc)' : `${eppCpu.toFixed(0)} µs`} (${cpu.epp!.requests.toLocaleString('en-US')} requests)`)
    console.log(`  serve ${serveCpu === undefined ? 'n/a (no /proc)' : `${serveCpu.toFixed(0)} µs`} (${cpu.serve!.requests.toLocaleString('en-US')} requests, carrying the answers)`)
    console.log(`  epp ÷ serve: ${times(cpuRatio)}`)
    const floorCpu = per('floor')
    console.log(`  floor ${floorCpu === undefined ? 'n/a (no /proc)' : `${floorCpu.toFixed(0)} µs`} (${cpu.floor!.requests.toLocaleString('en-US')} requests: grpc-js + the picker's codec and answers, no routing)`)
    console.log(`  floor ÷ serve: ${times(ratio(floorCpu, serveCpu))} (what the same ext_proc exchange costs any picker on Node's gRPC, against serve's whole proxying)`)
    console.log(`  epp ÷ floor: ${times(ratio(eppCpu, floorCpu))} (what routing adds to the exchange)`)
    const h2FloorCpu = per('h2floor')
    console.log(`  h2floor ${h2FloorCpu === undefined ? 'n/a (no /proc)' : `${h2FloorCpu.toFixed(0)} µs`} (${cpu.h2floor!.requests.toLocaleString('en-US')} requests: node:http2 + gRPC framing by hand + the codec and answers, no grpc-js, no routing)`)
    console.log(`  h2floor ÷ serve: ${times(ratio(h2FloorCpu, serveCpu))} (the exchange on Node's HTTP/2 alone: below this no picker on Node goes)`)

    const verdict = (ok: boolean | undefined) => (ok === undefined ? 'UNDECIDED' : ok ? 'PASS' : 'FAIL')
    console.log('\ntargets:')
    console.log(`  decision p50 ≤ 100 µs (in the picker, body arriving → mutation leaving): ${us(inside.p50)} — ${verdict(inside.p50 <= 100)}`)
    console.log(`  decision p99 ≤ 1 ms (in the picker, body arriving → mutation leaving): ${us(inside.p99)} — ${verdict(inside.p99 <= 1000)}`)
    console.log(`  decision p50 ≤ 100 µs (gateway client-timed): ${us(dP50)} — ${verdict(dP50 <= 100)}`)
    console.log(`  decision p99 ≤ 1 ms (gateway client-timed): ${us(dP99)} — ${verdict(dP99 <= 1000)}`)
    console.log(`  pick p50 ≤ 100 µs (picker's histogram): ${boundUs(pickP50.bound)} — ${verdict(pickP50.bound <= 1e-4)}`)
    console.log(`  pick p99 ≤ 1 ms (picker's histogram): ${boundUs(pickP99.bound)} — ${verdict(pickP99.bound <= 1e-3)}`)
    console.log(`  epp CPU per request well under serve's (< 1×): ${times(cpuRatio)} — ${verdict(cpuRatio === undefined ? undefined : cpuRatio < 1)}`)
    console.log(`  no errors: ${errors} — ${verdict(errors === 0)}`)
    if (errors > 0) process.exitCode = 1
  } finally {
    await Promise.all(started.map((s) => s.stop()))
    rmSync(dir, { recursive: true, force: true })
  }
}

main()
  .catch((err: unknown) => {
    console.error(err)
    process.exitCode = 1
  })
  .finally(() => stopStarted())
