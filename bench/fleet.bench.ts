// A consistency check, not a measurement of the router: one model of a vLLM fleet (the
// simulator's) run in two harnesses. Live: `prefix-router serve` in front of
// `prefix-router sim` workers, each in its own process, over loopback HTTP, the simulator's
// clock running TIME_SCALE times faster than wall time. Virtual: the same workload, seed and
// duration through `replay`. The two tables are printed side by side and their hit rates
// should agree within 5 points; that they do says the live path (HTTP, the proxy, real
// processes) routes as the virtual engine does. Both sides are the same model, so neither
// says how a real fleet would fare, and the TTFT figures are simulated milliseconds; the
// router's own cost is bench/proxy.bench.ts's.
// Run: npm run bench:fleet    (WORKLOAD=long-context DURATION=6m TIME_SCALE=8 INSTANCES=7
//      STRATEGIES=random,prefix_aware,longest_prefix,longest_prefix:hash SEED=1 to change it)
import { spawn, type ChildProcess } from 'node:child_process'
import { fileURLToPath } from 'node:url'
import { Agent, request } from 'undici'
import { parseDuration, formatDuration } from '../src/replay/duration.js'
import { markdownReport } from '../src/replay/report.js'
import { runReplay } from '../src/replay/run.js'
import { resolveStrategies } from '../src/replay/strategies.js'
import { resolveParams, type TimedRequest } from '../src/replay/types.js'
import { WORKLOADS } from '../src/replay/workloads/index.js'
import { LIMITS } from '../src/core/options.js'

const WORKLOAD = process.env.WORKLOAD ?? 'long-context'
const DURATION_MS = parseDuration(process.env.DURATION ?? '6m')
const TIME_SCALE = Number(process.env.TIME_SCALE ?? 8)
const INSTANCES = Number(process.env.INSTANCES ?? 7)
const SEED = Number(process.env.SEED ?? 1)
const STRATEGIES = (process.env.STRATEGIES ?? 'random,prefix_aware,longest_prefix,longest_prefix:hash').split(',')
const PREFIX_LENGTH = LIMITS.prefixLength.default
const THRESHOLD = LIMITS.concurrencyThreshold.default
const root = fileURLToPath(new URL('..', import.meta.url))

function start(args: string[], ready: RegExp, stream: 'stdout' | 'stderr'): Promise<{ child: ChildProcess; out: () => string }> {
  const child = spawn(process.execPath, ['--initial-old-space-size=128', 'dist/cli.js', ...args], { cwd: root, stdio: ['ignore', 'pipe', 'pipe'] })
  let out = ''
  return new Promise((resolve, reject) => {
    child[stream]!.on('data', (d: Buffer) => {
      out += d.toString()
      if (ready.test(out)) resolve({ child, out: () => out })
    })
    child.once('exit', (c) => reject(new Error(`${args.join(' ')} exited ${c}: ${out}`)))
  })
}

interface LiveRow {
  strategy: string
  requests: number
  errors: number
  ttft: number[]
  prompt: number
  cached: number
  output: number
  perInstance: Map<string, number>
  overflow: number
}

/** Streams one request; resolves with what a client sees. */
async function send(agent: Agent, url: string, r: TimedRequest, row: LiveRow): Promise<void> {
  const body = JSON.stringify({ ...r.body, stream: true, stream_options: { include_usage: true } })
  const headers: Record<string, string> = { 'content-type': 'application/json' }
  if (r.tenant !== undefined) headers['x-amzn-sagemaker-prefix-aware-id'] = r.tenant
  const sent = performance.now()
  try {
    const res = await request(`${url}/v1/${r.api === 'chat' ? 'chat/completions' : 'completions'}`, { method: 'POST', body, headers, dispatcher: agent })
    if (res.statusCode !== 200) {
      await res.body.text()
      row.errors++
      return
    }
    const instance = String(res.headers['x-sim-instance'])
    let first = -1
    let text = ''
    for await (const chunk of res.body) {
      // The first event carries the first token (vLLM sends role and first token together).
      if (first < 0) first = performance.now()
      text += chunk.toString()
    }
    const usage = /"usage":\{"prompt_tokens":(\d+),"total_tokens":\d+,"completion_tokens":(\d+),"prompt_tokens_details":\{"cached_tokens":(\d+)/.exec(text)
    if (usage === null || first < 0) {
      row.errors++
      return
    }
    row.requests++
    row.ttft.push((first - sent) * TIME_SCALE) // back to simulated milliseconds
    row.prompt += Number(usage[1])
    row.output += Number(usage[2])
    row.cached += Number(usage[3])
    row.perInstance.set(instance, (row.perInstance.get(instance) ?? 0) + 1)
    if (res.headers['x-prefix-router-decision'] === 'overflow') row.overflow++
  } catch {
    row.errors++
  }
}

async function live(strategy: string, requests: TimedRequest[]): Promise<LiveRow> {
  const sim = await start(['sim', '--instances', String(INSTANCES), '--port', '0', '--time-scale', String(TIME_SCALE)], new RegExp(`(http://127\\.0\\.0\\.1:\\d+\\s+){${INSTANCES}}`), 'stdout')
  const urls = sim.out().match(/http:\/\/127\.0\.0\.1:\d+/g)!
  // `longest_prefix:balanced` (replay's name) is --strategy longest_prefix --placement balanced.
  const [name, placement] = strategy.split(':')
  const router = await start(
    ['serve', ...urls.flatMap((u) => ['--upstream', u]), '--strategy', name!, ...(placement ? ['--placement', placement] : []), '--prefix-length', String(PREFIX_LENGTH), '--concurrency-threshold', String(THRESHOLD), '--port', '0', '--admin-port', '0', '--host', '127.0.0.1', '--debug-headers', '--log-level', 'warn'],
    /on (http:\/\/[\d.:]+) \(admin/,
    'stderr',
  )
  const url = /on (http:\/\/[\d.:]+) \(admin/.exec(router.out())![1]!
  const agent = new Agent({ connections: 512, keepAliveTimeout: 60_000 })
  const row: LiveRow = { strategy, requests: 0, errors: 0, ttft: [], prompt: 0, cached: 0, output: 0, perInstance: new Map(), overflow: 0 }
  const t0 = performance.now() + 20
  const pending: Promise<void>[] = []
  let i = 0
  try {
    await new Promise<void>((resolve) => {
      const tick = () => {
        const now = performance.now()
        while (i < requests.length && t0 + requests[i]!.at / TIME_SCALE <= now) pending.push(send(agent, url, requests[i++]!, row))
        if (i < requests.length) setTimeout(tick, Math.max(0, t0 + requests[i]!.at / TIME_SCALE - performance.now()))
        else resolve()
      }
      tick()
    })
    await Promise.all(pending)
  } finally {
    await agent.close()
    router.child.kill('SIGTERM')
    sim.child.kill('SIGTERM')
  }
  return row
}

const q = (sorted: number[], p: number) => sorted[Math.min(sorted.length - 1, Math.floor(p * sorted.length))] ?? NaN
const pct = (v: number) => `${(v * 100).toFixed(1)}%`

async function main(): Promise<void> {
  const w = WORKLOADS[WORKLOAD]
  if (w === undefined) throw new Error(`WORKLOAD must be one of ${Object.keys(WORKLOADS).join(', ')}`)
  const params = resolveParams(w)
  const requests = [...w.generate(params, { seed: SEED, durationMs: DURATION_MS })]
  console.log(`fleet consistency check (one simulated model, live and virtual; not a measurement of the router): ${WORKLOAD}, ${INSTANCES} instances (llama-3.1-70b-p5), ${formatDuration(DURATION_MS)} simulated, seed ${SEED}, ${requests.length} requests; live at time scale ${TIME_SCALE} (${formatDuration(DURATION_MS / TIME_SCALE)} of wall time per strategy)\n`)

  const virtual = await runReplay({
    requests,
    source: { workload: WORKLOAD, params },
    strategies: resolveStrategies(STRATEGIES),
    instances: INSTANCES,
    durationMs: DURATION_MS,
    sim: {},
    prefixLength: PREFIX_LENGTH,
    concurrencyThreshold: THRESHOLD,
    routerReplicas: 1,
    seed: SEED,
    events: [],
  })
  console.log('virtual (prefix-router replay, same requests):\n')
  console.log(markdownReport(virtual))

  console.log('live (prefix-router serve → prefix-router sim over loopback HTTP; TTFT at the client, in simulated ms):\n')
  console.log('| strategy | P50 TTFT ms | P90 TTFT ms | P99 TTFT ms | hit rate | req/s | output tok/s | instance share | overflow | errors | virtual hit rate | difference |')
  console.log('| --- | ---: | ---: | ---: | ---: | ---: | ---: | :---: | ---: | ---: | ---: | ---: |')
  let worst = 0
  for (const s of STRATEGIES) {
    const row = await live(s, requests)
    const t = [...row.ttft].sort((a, b) => a - b)
    const hit = row.prompt === 0 ? NaN : row.cached / row.prompt
    const v = virtual.strategies.find((x) => x.strategy === s)!
    const shares = [...row.perInstance.values()].map((n) => n / row.requests)
    const diff = (hit - v.hitRate) * 100
    worst = Math.max(worst, Math.abs(diff))
    console.log(
      `| ${s} | ${Math.round(q(t, 0.5))} | ${Math.round(q(t, 0.9))} | ${Math.round(q(t, 0.99))} | ${pct(hit)} | ${(row.requests / (DURATION_MS / 1000)).toFixed(2)} | ${Math.round(row.output / (DURATION_MS / 1000))} | ${pct(Math.min(...shares))}–${pct(Math.max(...shares))} | ${pct(row.overflow / Math.max(1, row.requests))} | ${row.errors} | ${pct(v.hitRate)} | ${diff >= 0 ? '+' : ''}${diff.toFixed(1)} pts |`,
    )
  }
  console.log(`\nlive vs virtual hit rate: largest difference ${worst.toFixed(1)} points (target within 5: ${worst <= 5 ? 'met' : 'MISSED'})`)
}

main().catch((err: unknown) => {
  console.error(err)
  process.exitCode = 1
})
