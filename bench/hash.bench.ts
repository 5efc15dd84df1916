// XXH3-64 throughput against @node-rs/xxhash (its XXH3-64, the baseline of every ratio),
// xxhash-wasm (XXH64) and node:crypto sha1; then Router.pick() + release(), and the pick as
// serve makes it, with caches warm (a tight loop) and cold (caches evicted between picks).
// Run: npm run bench   (BENCH_TIME_MS=… to change the time per task, default 400;
// EVICT_KIB=… the memory the cold row touches between two picks, default 4096; COLD_ONLY=1
// runs the warm/cold table alone)
//
// Each sample runs a batch of calls sized to ~20 µs, so timer resolution does not swamp
// sub-microsecond calls; "median" below is the median of per-call times across batches.
import { createHash, randomBytes } from 'node:crypto'
import { xxh3 as nodeRs } from '@node-rs/xxhash'
import xxhashWasm from 'xxhash-wasm'
import { nativeRequest } from '../src/core/key/native-key.js'
import { buildInfo, Router, xxh3 } from '../src/index.js'
import { chatBody, machine, perCall } from './harness.js'

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

/**
 * The pick serve makes for a chat request (an extracted 4,096-character key whose hashes the
 * scan made, a model group, one instance at the default 8,192 virtual nodes), timed call by
 * call: in a tight loop, where its code and data stay in cache, and cold: before each pick, a
 * JSON.parse of a request body and EVICT_KIB of memory touched, as a proxy's handling of a
 * whole request does between two picks (other code runs, and the core's L2 and TLB are
 * evicted). Warm and cold alternate over rounds; each row is the median of its rounds' medians.
 */
async function coldTable(): Promise<void> {
  const evictBytes = Number(process.env.EVICT_KIB ?? 4096) * 1024
  const r = new Router({ strategy: 'prefix_aware', instances: [{ id: 'http://10.0.0.1:8000', groups: ['stub'] }] })
  const texts = Array.from({ length: 64 }, (_, i) => chatBody(i, false))
  const bodies = texts.map((t) => Buffer.from(t))
  const keyOptions = { span: 4096, prefixLength: 4096, maxDepth: 64, hash: { tenant: undefined, blockBytes: 0 } }
  const key = (i: number) => {
    const out = nativeRequest('chat', bodies[i & 63]!, keyOptions)
    if (out.status !== 'ok' || !out.request.key.hashed) throw new Error('the chat body did not extract a hashed key')
    return out.request.key
  }
  const opts = { group: 'stub' }
  const trash = new Uint8Array(evictBytes)
  const times = new Float64Array(4000)
  let parsed = 0
  const run = (n: number, cold: boolean): number => {
    for (let i = 0; i < n; i++) {
      const k = key(i)
      if (cold) {
        parsed += (JSON.parse(texts[i & 63]!) as { messages: unknown[] }).messages.length
        for (let j = 0; j < trash.length; j += 64) trash[j]!++
      }
      const t0 = performance.now()
      const lease = r.pick(k, opts)
      times[i] = performance.now() - t0
      lease.release()
    }
    return [...times.subarray(0, n)].sort((a, b) => a - b)[n >> 1]! * 1e6
  }
  run(2000, false) // warm-up, discarded
  run(200, true)
  const warm: number[] = []
  const cold: number[] = []
  for (let round = 0; round < 7; round++) {
    warm.push(run(4000, false))
    cold.push(run(400, true))
  }
  if (parsed === 0) throw new Error('the cold rows parsed nothing')
  const median = (xs: number[]) => [...xs].sort((a, b) => a - b)[xs.length >> 1]!
  const w = median(warm)
  const c = median(cold)
  console.log(`\nRouter.pick() of an extracted chat key (4,096 characters, hashed by the scan), group, 1 instance; a body parsed and ${evictBytes >> 10} KiB touched before each cold pick`)
  console.log(`${pad('caches', 10)}${pad('median', 12)}ratio to warm`)
  console.log(`${pad('warm', 10)}${pad(fmtNs(w), 12)}1.00x`)
  console.log(`${pad('cold', 10)}${pad(fmtNs(c), 12)}${(c / w).toFixed(2)}x`)
  r.close()
}

console.log(`prefix-router hash benchmark — node ${process.version}, ${TIME} ms per task`)
console.log(`machine: ${machine()}`)
if (process.env.COLD_ONLY === undefined) {
  await hashTable()
  await pickTable()
  await longestTable()
}
await coldTable()
