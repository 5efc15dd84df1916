// XXH3-64 throughput against @node-rs/xxhash (its XXH3-64, the baseline of every ratio),
// xxhash-wasm (XXH64) and node:crypto sha1; then Router.pick() + release().
// Run: npm run bench   (BENCH_TIME_MS=… to change the time per task, default 400)
//
// Each sample runs a batch of calls sized to ~20 µs, so timer resolution does not swamp
// sub-microsecond calls; "median" below is the median of per-call times across batches.
import { createHash, randomBytes } from 'node:crypto'
import { xxh3 as nodeRs } from '@node-rs/xxhash'
import xxhashWasm from 'xxhash-wasm'
import { buildInfo, Router, xxh3 } from '../src/index.js'
import { perCall } from './harness.js'

const TIME = Number(process.env.BENCH_TIME_MS ?? 400)
const sizes: [string, number][] = [
  ['64 B', 64],
  ['1 KiB', 1 << 10],
  ['4 KiB', 4 << 10],
  ['64 KiB', 64 << 10],
  ['1 MiB', 1 << 20],
]

interface Row { name: string; perCallNs: number; medianNs: number }

async function measure(name: string, fn: () => void, estimateNs: number, targetUs = 20): Promise<Row> {
  const r = await perCall(name, fn, estimateNs, { timeMs: TIME, warmupMs: 100, targetUs })
  return { name, perCallNs: r.meanNs, medianNs: r.medianNs }
}

const fmtRate = (bytes: number, ns: number) => `${(bytes / ns).toFixed(2)} GB/s`
const fmtNs = (ns: number) => (ns < 1000 ? `${ns.toFixed(0)} ns` : `${(ns / 1000).toFixed(2)} µs`)
const pad = (s: string, n: number) => s.padEnd(n)

async function hashTable(): Promise<void> {
  const wasm = await xxhashWasm()
  console.log(`\nXXH3-64 throughput (our SIMD path: ${buildInfo().simd}); ratio = ours ÷ @node-rs/xxhash, higher is better`)
  console.log(`${pad('size', 8)}${pad('prefix-router', 16)}${pad('@node-rs/xxhash', 17)}${pad('xxhash-wasm h64', 17)}${pad('sha1', 12)}ratio`)
  for (const [label, n] of sizes) {
    const data = randomBytes(n)
    const est = 20 + n / 10 // rough ns per call, only to size the batches
    const ours = await measure('ours', () => xxh3(data), est)
    const base = await measure('node-rs', () => nodeRs.xxh64(data), est)
    const w = await measure('wasm', () => wasm.h64Raw(data), est * 2)
    const sha = await measure('sha1', () => createHash('sha1').update(data).digest(), est * 4)
    console.log(
      `${pad(label, 8)}${pad(fmtRate(n, ours.perCallNs), 16)}${pad(fmtRate(n, base.perCallNs), 17)}${pad(fmtRate(n, w.perCallNs), 17)}${pad(fmtRate(n, sha.perCallNs), 12)}${(base.perCallNs / ours.perCallNs).toFixed(2)}x`,
    )
  }
}

async function pickTable(): Promise<void> {
  const instances = Array.from({ length: 7 }, (_, i) => ({ id: `http://10.0.0.${i + 1}:8000` }))
  const r = new Router({ strategy: 'prefix_aware', prefixLength: 65536, instances })
  console.log('\nRouter.pick() + lease.release(), prefix_aware, 7 instances; baseline = xxh3 of the same bytes alone')
  console.log(`${pad('prefix', 10)}${pad('median', 12)}${pad('mean', 12)}${pad('ops/s', 14)}${pad('hash alone', 13)}target`)
  for (const [label, n, targetNs] of [
    ['4 KiB', 4 << 10, 1000],
    ['64 KiB', 64 << 10, 5000],
  ] as const) {
    // A few distinct prefixes so the ring lookups are not all one cache line.
    const prefixes = Array.from({ length: 64 }, () => randomBytes(n))
    let k = 0
    const pr = await measure('pick', () => r.pick(prefixes[k++ & 63]!).release(), 300 + n / 10)
    const h = await measure('hash', () => xxh3(prefixes[k++ & 63]!), 50 + n / 10)
    const ok = pr.medianNs < targetNs ? 'met' : 'MISSED'
    console.log(
      `${pad(label, 10)}${pad(fmtNs(pr.medianNs), 12)}${pad(fmtNs(pr.perCallNs), 12)}${pad(Math.round(1e9 / pr.perCallNs).toLocaleString('en-US'), 14)}${pad(fmtNs(h.perCallNs), 13)}< ${fmtNs(targetNs)} median: ${ok}`,
    )
  }
  // Text prefixes go through the code-point cut and UTF-8 conversion in C++.
  const text = 'You are a helpful assistant. '.repeat(200).slice(0, 4096)
  const tr = await measure('pick-text', () => r.pick(text).release(), 2000)
  console.log(`${pad('4 Ki chars', 10)}${pad(fmtNs(tr.medianNs), 12)}${pad(fmtNs(tr.perCallNs), 12)}${pad(Math.round(1e9 / tr.perCallNs).toLocaleString('en-US'), 14)}(string prefix, ASCII)`)
  r.close()
}

/**
 * longest_prefix: pick + firstToken + release of chat-sized prompts, whose index holds many
 * conversations (so lookups miss caches as in a fleet), against prefix_aware's pick of the same
 * text in the same run. Its match covers up to matchLength code points, so its cost grows with
 * the prompt; prefix_aware hashes prefixLength only.
 */
async function longestTable(): Promise<void> {
  const instances = Array.from({ length: 8 }, (_, i) => ({ id: `http://10.0.0.${i + 1}:8000` }))
  const longest = new Router({ strategy: 'longest_prefix', instances })
  const aware = new Router({ strategy: 'prefix_aware', instances })
  const words = 'the report policy revenue cluster latency prefix token document summary '.split(' ')
  const prose = (seed: number, chars: number): string => {
    let out = `${seed} `
    for (let i = 0; out.length < chars; i++) out += `${words[(seed * 31 + i * 7) % words.length]} `
    return out.slice(0, chars)
  }
  console.log('\nlongest_prefix pick() + firstToken() + release(), 8 instances, 2,000 conversations indexed; baseline = prefix_aware pick() + release() of the same text')
  console.log(`${pad('prompt', 12)}${pad('median', 12)}${pad('mean', 12)}${pad('prefix_aware', 14)}ratio`)
  for (const chars of [4096, 16384, 65536]) {
    const prompts = Array.from({ length: 2000 }, (_, i) => prose(i, chars))
    for (const p of prompts) longest.pick(p).release() // fill the index
    let k = 0
    const lp = await measure('longest', () => {
      const l = longest.pick(prompts[k++ % prompts.length]!)
      l.firstToken()
      l.release()
    }, 1000 + chars * 2)
    const pa = await measure('aware', () => aware.pick(prompts[k++ % prompts.length]!).release(), 300 + chars / 10)
    console.log(`${pad(`${chars / 1024} Ki chars`, 12)}${pad(fmtNs(lp.medianNs), 12)}${pad(fmtNs(lp.perCallNs), 12)}${pad(fmtNs(pa.perCallNs), 14)}${(lp.perCallNs / pa.perCallNs).toFixed(1)}x`)
  }
  longest.close()
  aware.close()
}

console.log(`prefix-router hash benchmark — node ${process.version}, ${TIME} ms per task`)
await hashTable()
await pickTable()
await longestTable()
