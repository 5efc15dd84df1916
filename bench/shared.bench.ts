// Router.pick() + lease.release() through a state shared between processes (anonymous shared
// memory, or a file where that is unavailable) against the process-private state, same options, same run; and what the
// garbage-collector safety net for unreleased leases adds to each pick.
// Run: npm run bench:shared   (BENCH_TIME_MS=… to change the time per task, default 400)
//
// Each sample runs a batch of calls sized to ~20 µs; "median" is the median of per-call times
// across batches. Private and shared alternate over ROUNDS rounds and each reports the median
// of its rounds, so drift on a busy machine hits both alike.
import { randomBytes } from 'node:crypto'
import { availableParallelism, cpus } from 'node:os'
import { Bench } from 'tinybench'
import { Router } from '../src/index.js'

const TIME = Number(process.env.BENCH_TIME_MS ?? 400)
const ROUNDS = 3

async function medianNs(fn: () => void, estimateNs: number): Promise<number> {
  const batch = Math.max(1, Math.round(20_000 / estimateNs))
  const bench = new Bench({ time: TIME, warmupTime: 100 })
  bench.add('task', () => {
    for (let i = 0; i < batch; i++) fn()
  })
  await bench.run()
  const r = bench.tasks[0]!.result
  if (r.state !== 'completed') throw new Error(`task: ${r.state}`)
  return (r.latency.p50 * 1e6) / batch
}

const median = (xs: number[]) => [...xs].sort((a, b) => a - b)[Math.floor(xs.length / 2)]!
const fmtNs = (ns: number) => (ns < 1000 ? `${ns.toFixed(0)} ns` : `${(ns / 1000).toFixed(2)} µs`)
const pad = (s: string, n: number) => s.padEnd(n)

const cpu = cpus()
console.log(`prefix-router shared-state benchmark — node ${process.version}, ${TIME} ms per task, ${ROUNDS} rounds`)
console.log(`machine: ${cpu.length} × ${cpu[0]?.model ?? 'unknown CPU'}, available parallelism ${availableParallelism()}`)

const instances = Array.from({ length: 8 }, (_, i) => ({ id: `http://10.0.0.${i + 1}:8000` }))
const prefixes = Array.from({ length: 64 }, () => randomBytes(4096))
const words = 'the report policy revenue cluster latency prefix token document summary '.split(' ')
const prompts = Array.from({ length: 512 }, (_, seed) => {
  let out = `${seed} `
  for (let i = 0; out.length < 4096; i++) out += `${words[(seed * 31 + i * 7) % words.length]} `
  return out.slice(0, 4096)
})

console.log('\npick() + release(), 8 instances, 4 KiB prefixes; ratio = shared ÷ private (target ≤ 1.5x)')
console.log(`${pad('strategy', 30)}${pad('private', 12)}${pad('shared', 12)}ratio`)
for (const strategy of ['prefix_aware', 'least_outstanding_requests', 'longest_prefix'] as const) {
  const local = new Router({ strategy, instances })
  const shared = new Router({ strategy, instances, shared: true })
  const text = strategy === 'longest_prefix'
  for (const r of [local, shared]) if (text) for (const p of prompts) r.pick(p).release() // fill the index
  let k = 0
  const run = (r: Router) => (text ? () => r.pick(prompts[k++ & 511]!).release() : () => r.pick(prefixes[k++ & 63]!).release())
  const a: number[] = []
  const b: number[] = []
  for (let i = 0; i < ROUNDS; i++) {
    a.push(await medianNs(run(local), text ? 8000 : 1000))
    b.push(await medianNs(run(shared), text ? 8000 : 1000))
  }
  const p = median(a)
  const s = median(b)
  console.log(`${pad(strategy, 30)}${pad(fmtNs(p), 12)}${pad(fmtNs(s), 12)}${(s / p).toFixed(2)}x`)
  local.close()
  shared.close()
}

// Every lease is registered with a FinalizationRegistry at pick (without an unregister token:
// release marks the lease held, and the finaliser skips a released one), so one dropped by a
// buggy embedder is still ended. Its cost in isolation, against the whole pick() + release()
// it is part of.
{
  const r = new Router({ strategy: 'prefix_aware', instances })
  const registry = new FinalizationRegistry<{ slot: number; prefill: number }>(() => {})
  let k = 0
  const reg: number[] = []
  const whole: number[] = []
  for (let i = 0; i < ROUNDS; i++) {
    reg.push(await medianNs(() => {
      const o = {}
      registry.register(o, { slot: 0, prefill: 0 })
    }, 200))
    whole.push(await medianNs(() => r.pick(prefixes[k++ & 63]!).release(), 1000))
  }
  const g = median(reg)
  const w = median(whole)
  console.log(`\nunreleased-lease safety net: register ${fmtNs(g)} per lease, ${((100 * g) / w).toFixed(0)}% of a pick() + release() (${fmtNs(w)}, which includes it)`)
  r.close()
}
