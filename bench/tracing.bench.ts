// What the request spans cost when no OpenTelemetry SDK is registered (the default): one
// request's tracing calls (request span, pick and forward spans, trace-header injection, three
// ends) against the same request's attribute objects and upstream headers built without them,
// measured in the same run. Run: npm run bench:tracing   (BENCH_TIME_MS=… per task, default 1000)
import { cpus } from 'node:os'
import { Bench } from 'tinybench'
import { ATTR, endSpan, injectInto, startChild, startRequestSpan } from '../src/proxy/tracing.js'

const TIME = Number(process.env.BENCH_TIME_MS ?? 1000)
const BATCH = 1000
const clientHeaders = { 'content-type': 'application/json', 'x-request-id': 'bench-1' }

function attributesOnly(i: number): number {
  const req = { [ATTR.requestId]: 'bench-1', [ATTR.endpoint]: 'default', [ATTR.strategy]: 'prefix_aware', [ATTR.model]: 'm' }
  const pick = { [ATTR.requestId]: 'bench-1', [ATTR.retries]: 0 }
  const fwd = { [ATTR.requestId]: 'bench-1', [ATTR.instance]: 'http://10.0.0.1:8000', [ATTR.decision]: 'target', [ATTR.retries]: 0 }
  const upstream: Record<string, string> = { 'content-type': 'application/json' }
  return Object.keys(req).length + Object.keys(pick).length + Object.keys(fwd).length + Object.keys(upstream).length + i
}

function traced(i: number): number {
  const span = startRequestSpan(clientHeaders, { [ATTR.requestId]: 'bench-1', [ATTR.endpoint]: 'default', [ATTR.strategy]: 'prefix_aware', [ATTR.model]: 'm' })
  const pick = startChild(span, 'prefix_router.pick', { [ATTR.requestId]: 'bench-1', [ATTR.retries]: 0 })
  endSpan(pick, undefined)
  const fwd = startChild(span, 'prefix_router.forward', { [ATTR.requestId]: 'bench-1', [ATTR.instance]: 'http://10.0.0.1:8000', [ATTR.decision]: 'target', [ATTR.retries]: 0 })
  const upstream: Record<string, string> = { 'content-type': 'application/json' }
  injectInto(span, fwd, upstream)
  endSpan(fwd, 200)
  endSpan(span.span, 200)
  return Object.keys(upstream).length + i
}

let sink = 0
const bench = new Bench({ time: TIME, warmupTime: 200 })
bench.add('attributes and headers only (baseline)', () => {
  for (let i = 0; i < BATCH; i++) sink += attributesOnly(i)
})
bench.add('with the spans, no SDK registered', () => {
  for (let i = 0; i < BATCH; i++) sink += traced(i)
})
await bench.run()

const perRequestNs = bench.tasks.map((t) => {
  if (t.result.state !== 'completed') throw new Error(`${t.name}: ${t.result.state}`)
  return (t.result.latency.p50 * 1e6) / BATCH
})
const cpu = cpus()
console.log(`machine: ${cpu.length} × ${cpu[0]?.model ?? 'unknown CPU'}; node ${process.version}; median of ${TIME} ms per task, warm-up discarded`)
for (const [i, t] of bench.tasks.entries()) console.log(`  ${t.name.padEnd(42)} ${perRequestNs[i]!.toFixed(0).padStart(6)} ns per request`)
console.log(`tracing adds ${(perRequestNs[1]! - perRequestNs[0]!).toFixed(0)} ns per request (${(perRequestNs[1]! / perRequestNs[0]!).toFixed(1)}x the baseline)`)
if (sink === 0.5) console.log('') // keeps the loops from being optimised away
