// What the router's disaggregated step costs beyond the legs themselves: `prefix-router serve
// --prefill --decode` in front of the simulator's prefill and decode workers on loopback, against
// a client that runs the same two legs itself (the prefill body with do_remote_decode to the
// prefill worker, then the original body with the KV parameters it returned to the decode
// worker), and against the client's prefill leg followed by the decode leg through a plain
// `serve --upstream` (the forward every request pays). The first difference is everything the router adds: scheduling the pair, rewriting both
// bodies, checking the parameters, forwarding two requests instead of none; the second, the step itself. Target: ≤ 1 ms at
// p50 beyond the prefill leg. The two arms alternate request by request in one run, so the
// shared machine's noise falls on both; the first WARMUP of each are discarded.
//
//   npm run bench:pd-overhead            (REQUESTS=400 by default)
import { Client } from 'undici'
import { histogram, machine, startProcess, stopStarted, type Started } from './harness.js'

const REQUESTS = Number(process.env.REQUESTS ?? 400)
const WARMUP = 50
const root = new URL('..', import.meta.url).pathname

// The simulator at 100× time: a step of the tiny profile is 20 µs, so what is measured is the
// HTTP and the router, not simulated GPU time (which both arms would pay alike anyway).
const simArgs = ['--profile', 'tiny', '--time-scale', '100', '--port', '0', '--instances', '1']

async function sim(role: 'prefill' | 'decode'): Promise<{ url: string; proc: Started }> {
  const proc = await startProcess(process.execPath, ['dist/cli.js', 'sim', '--role', role, ...simArgs], /(http:\/\/127\.0\.0\.1:\d+)/, 'stdout', { cwd: root })
  return { url: proc.match[1]!, proc }
}

const body = (i: number) => ({ model: 'sim-tiny', prompt: `request ${i}: ${'a fresh prompt that no worker holds, long enough to be worth moving. '.repeat(8)}`, max_tokens: 4 })

async function post(c: Client, path: string, b: unknown): Promise<any> {
  const res = await c.request({ path, method: 'POST', body: JSON.stringify(b), headers: { 'content-type': 'application/json' } })
  const text = await res.body.text()
  if (res.statusCode !== 200) throw new Error(`${path}: ${res.statusCode} ${text}`)
  return JSON.parse(text)
}

async function main(): Promise<void> {
  const prefill = await sim('prefill')
  const decode = await sim('decode')
  const serve = await startProcess(
    process.execPath,
    ['--initial-old-space-size=128', 'dist/cli.js', 'serve', '--prefill', prefill.url, '--decode', decode.url, '--pd-threshold', '0', '--port', '0', '--admin-port', '0', '--host', '127.0.0.1', '--log-level', 'warn'],
    /on (http:\/\/[\d.:]+) \(admin/,
    'stderr',
    { cwd: root },
  )
  // The same router build in front of the decode worker alone, as any request is forwarded: the
  // decode leg through it is the forward a disaggregated request makes anyway.
  const plain = await startProcess(
    process.execPath,
    ['--initial-old-space-size=128', 'dist/cli.js', 'serve', '--upstream', decode.url, '--port', '0', '--admin-port', '0', '--host', '127.0.0.1', '--log-level', 'warn'],
    /on (http:\/\/[\d.:]+) \(admin/,
    'stderr',
    { cwd: root },
  )
  const router = new Client(serve.match[1]!)
  const viaPlain = new Client(plain.match[1]!)
  const toPrefill = new Client(prefill.url)
  const toDecode = new Client(decode.url)
  const routed = histogram()
  const direct = histogram()
  const prefillLeg = histogram()
  const forwarded = histogram()
  const us = (t0: bigint) => Math.max(1, Number(process.hrtime.bigint() - t0) / 1000)
  for (let i = 0; i < REQUESTS + WARMUP; i++) {
    // Through the router.
    let t0 = process.hrtime.bigint()
    const r = await post(router, '/v1/completions', body(2 * i))
    const tRouted = us(t0)
    if (r.usage?.completion_tokens !== 4) throw new Error(`the router's answer: ${JSON.stringify(r)}`)
    // The same two legs, sent by the client itself, as the router sends them.
    t0 = process.hrtime.bigint()
    const p = await post(toPrefill, '/v1/completions', {
      ...body(2 * i + 1),
      max_tokens: 1,
      min_tokens: 1,
      stream: false,
      kv_transfer_params: { do_remote_decode: true, do_remote_prefill: false, remote_engine_id: null, remote_block_ids: null, remote_host: null, remote_port: null },
    })
    const tPrefill = us(t0)
    if (p.kv_transfer_params?.do_remote_prefill !== true) throw new Error(`the prefill worker's answer: ${JSON.stringify(p)}`)
    const d = await post(toDecode, '/v1/completions', { ...body(2 * i + 1), kv_transfer_params: p.kv_transfer_params })
    const tDirect = us(t0)
    if (d.usage?.completion_tokens !== 4) throw new Error(`the decode worker's answer: ${JSON.stringify(d)}`)
    // Once more, the decode leg through the plain router.
    t0 = process.hrtime.bigint()
    const p2 = await post(toPrefill, '/v1/completions', { ...body(2 * i + 1), max_tokens: 1, min_tokens: 1, stream: false, kv_transfer_params: { do_remote_decode: true, do_remote_prefill: false, remote_engine_id: null, remote_block_ids: null, remote_host: null, remote_port: null } })
    const tPrefill2 = us(t0)
    t0 = process.hrtime.bigint()
    const d2 = await post(viaPlain, '/v1/completions', { ...body(2 * i + 1), kv_transfer_params: p2.kv_transfer_params })
    const tForwarded = tPrefill2 + us(t0)
    if (d2.usage?.completion_tokens !== 4) throw new Error(`the plain router's answer: ${JSON.stringify(d2)}`)
    if (i < WARMUP) continue
    forwarded.recordValue(tForwarded)
    routed.recordValue(tRouted)
    direct.recordValue(tDirect)
    prefillLeg.recordValue(tPrefill)
  }
  await Promise.all([router.close(), viaPlain.close(), toPrefill.close(), toDecode.close()])
  await Promise.all([serve.stop(), plain.stop()])
  await stopStarted()
  await Promise.all([prefill.proc.stop(), decode.proc.stop()])

  const ms = (h: ReturnType<typeof histogram>, q: number) => h.getValueAtPercentile(q) / 1000
  console.log(`machine: ${machine()}`)
  console.log(`${REQUESTS} requests each way (after ${WARMUP} warm-up), alternating; the simulator's tiny profile at 100x time, one prefill and one decode worker\n`)
  console.log('                                   p50 ms    p90 ms    p99 ms')
  const row = (name: string, h: ReturnType<typeof histogram>) => console.log(`${name.padEnd(34)} ${ms(h, 50).toFixed(3).padStart(7)}   ${ms(h, 90).toFixed(3).padStart(7)}   ${ms(h, 99).toFixed(3).padStart(7)}`)
  row('the prefill leg alone (direct)', prefillLeg)
  row('both legs, sent by the client', direct)
  row('prefill direct + decode via serve', forwarded)
  row('both legs, through serve (pd)', routed)
  const all = ms(routed, 50) - ms(direct, 50)
  const step = ms(routed, 50) - ms(forwarded, 50)
  console.log(`\neverything serve adds at p50 (pd against the client's own two legs): ${all.toFixed(3)} ms (${(ms(routed, 50) / ms(direct, 50)).toFixed(2)}x)`)
  console.log(`the disaggregated step at p50 (pd against the prefill leg plus the forward any request makes): ${step.toFixed(3)} ms`)
  console.log(`target: the step adds ≤ 1 ms at p50 beyond the prefill leg: ${step <= 1 ? 'met' : 'NOT met'}`)
}

await main()
