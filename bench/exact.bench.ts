// The exact view's cost: a longest_prefix pick that brings the prompt's token ids (hashed
// natively, matched against what 8 instances' engines hold), against the approximate pick of
// the same prompt in the same run; then how many KV events the index applies per second.
// Run: npx tsx bench/exact.bench.ts   (BENCH_TIME_MS=… per task, default 500)
//
// The views are realistic in size: each instance's engine holds 16 documents of 32k tokens
// on its GPU and 8 more offloaded (24,576 + 12,288 blocks of 16 tokens, 300k entries across
// the fleet), and every prompt is the opening of a document one instance holds.
import { exactSeed } from '../src/core/exact-seed.js'
import { Router } from '../src/core/router.js'
import { machine, perCall } from './harness.js'

const TIME = Number(process.env.BENCH_TIME_MS ?? 500)
const BS = 16
const DOC_TOKENS = 32768
const INSTANCES = 8
const GPU_DOCS = 16
const CPU_DOCS = 8
const SEED = exactSeed(undefined, undefined)

console.log(`machine: ${machine()}`)

const docTokens = (d: number): Uint32Array => {
  const t = new Uint32Array(DOC_TOKENS)
  // Distinct documents; ids in a 150k vocabulary like real tokenizers.
  for (let i = 0; i < DOC_TOKENS; i++) t[i] = (d * 7919 + i * 104729) % 150000
  return t
}
const docs = Array.from({ length: INSTANCES * (GPU_DOCS + CPU_DOCS) }, (_, d) => docTokens(d))
// The routing text of a prompt as serve sees it: words for its ids (about 5 bytes a token).
const textOf = (t: Uint32Array) => Array.from(t, (x) => x.toString(36)).join(' ')

const instances = Array.from({ length: INSTANCES }, (_, i) => ({ id: `http://10.0.0.${i + 1}:8000` }))
const router = new Router({ strategy: 'longest_prefix', instances, matchLength: 262144 })
let engineBase = 1n
const hashes = (n: number) => {
  const e = new BigUint64Array(n)
  for (let i = 0; i < n; i++) e[i] = engineBase++
  return e
}
// Resident memory around the build, beside the index's own estimate.
const rssBefore = process.memoryUsage.rss()
for (let i = 0; i < INSTANCES; i++) {
  const id = instances[i]!.id
  router.exact.setView(id, 'fresh')
  for (let k = 0; k < GPU_DOCS + CPU_DOCS; k++) {
    const t = docs[i * (GPU_DOCS + CPU_DOCS) + k]!
    const got = router.exact.store(id, null, hashes(DOC_TOKENS / BS), t, BS, SEED, k < GPU_DOCS ? 0 : 1)
    if (got !== DOC_TOKENS / BS) throw new Error(`store returned ${got}`)
  }
}
const s = router.stats()
const rssGrowth = process.memoryUsage.rss() - rssBefore
console.log(
  `exact view: ${s.exactEntries} entries, ${(s.exactMemoryBytes / 2 ** 20).toFixed(1)} MiB estimated (${(s.exactMemoryBytes / s.exactEntries).toFixed(0)} B/entry); ` +
    `the process grew ${(rssGrowth / 2 ** 20).toFixed(1)} MiB building it (its event arrays included)`,
)

console.log('\npick cost, µs per pick (ratio = with token ids ÷ approximate alone, same prompts, same run)')
console.log(`${'prompt'.padEnd(14)}${'approximate'.padEnd(14)}${'exact'.padEnd(10)}${'ratio'.padEnd(8)}right instance`)
for (const tokens of [1024, 8192, 32768]) {
  // Prompts: the openings of 8 GPU-held documents, one per instance.
  const prompts = Array.from({ length: INSTANCES }, (_, i) => docs[i * (GPU_DOCS + CPU_DOCS) + 3]!.subarray(0, tokens))
  const texts = prompts.map(textOf)
  let right = 0
  prompts.forEach((ids, i) => {
    const l = router.pick(texts[i]!, { tokens: { ids, seed: SEED }, now: 0 })
    right += l.instance === instances[i]!.id ? 1 : 0
    l.release()
  })
  let k = 0
  const approx = (await perCall('approximate', () => {
    const i = k++ % INSTANCES
    router.pick(texts[i]!).release()
  }, 20000, { timeMs: TIME, warmupMs: 200, targetUs: 200 })).medianNs
  k = 0
  const exact = (await perCall('exact', () => {
    const i = k++ % INSTANCES
    router.pick(texts[i]!, { tokens: { ids: prompts[i]!, seed: SEED }, now: 0 }).release()
  }, 25000, { timeMs: TIME, warmupMs: 200, targetUs: 200 })).medianNs
  console.log(`${`${tokens} tokens`.padEnd(14)}${(approx / 1000).toFixed(2).padEnd(14)}${(exact / 1000).toFixed(2).padEnd(10)}${`${(exact / approx).toFixed(2)}x`.padEnd(8)}${right}/${INSTANCES}`)
}

// Events: a BlockStored of 16 blocks (a step's worth for a long prefill) and the BlockRemoved
// of the blocks it evicts, on one instance whose engine is full, as a steady state.
console.log('\nKV events applied (a store of 16 blocks, then the removal of 16 older ones)')
const id = instances[0]!.id
const fresh = docTokens(9999).subarray(0, 16 * BS)
const live: BigUint64Array[] = []
for (let i = 0; i < 64; i++) {
  const e = hashes(16)
  router.exact.store(id, null, e, fresh, BS, SEED, 0)
  live.push(e)
}
const pair = (await perCall('events', () => {
  const e = hashes(16)
  router.exact.store(id, null, e, fresh, BS, SEED, 0)
  live.push(e)
  router.exact.remove(id, live.shift()!, 0)
}, 5000, { timeMs: TIME, warmupMs: 200, targetUs: 200 })).medianNs
console.log(`  ${(pair / 1000).toFixed(2)} µs per store+remove pair: ${Math.round(1e9 / pair).toLocaleString('en')} events/s, ${Math.round((32 * 1e9) / pair).toLocaleString('en')} blocks/s`)
router.close()
