// The KV-event path's index updates: decoded batches applied to the exact index by applyBatch
// (one native call per batch) against the per-event path it replaced (one native call per
// event, test/fleet/events/per-event-apply.ts), in the same run, on the same batches. Rounds
// alternate the two paths; the first round of each is a warm-up and is discarded; the
// figures are each path's median events/s over the rest, and the ratio batched / per-event.
// Batches are an engine step's worth under steady load: 12 BlockStored of 4 blocks of 16
// tokens each, continuing chains, and 4 BlockRemoved of the blocks stored 64 batches before,
// so the index stays the same size. Run: npm run bench:kv-apply  (ROUNDS=…, BATCHES=…)
import { exactSeed } from '../src/core/exact-seed.js'
import { Router } from '../src/core/router.js'
import { applyBatch, newCounts } from '../src/fleet/events/apply.js'
import type { KvEvent, KvEventBatch } from '../src/fleet/events/types.js'
import { applyPerEvent } from '../test/fleet/events/per-event-apply.js'
import { machine } from './harness.js'

const ROUNDS = Number(process.env.ROUNDS ?? 7)
const BATCHES = Number(process.env.BATCHES ?? 4000)
const BS = 16
const STORES = 12
const REMOVES = 4
const BLOCKS = 4
const LAG = 64
const ID = 'http://10.0.0.1:8000'

console.log(`machine: ${machine()}`)

/** BATCHES batches; hashes are offset by `base` so that each round stores blocks of its own. */
function batches(base: bigint): KvEventBatch[] {
  const out: KvEventBatch[] = []
  let h = base
  const storedAt: bigint[][] = []
  for (let b = 0; b < BATCHES; b++) {
    const events: KvEvent[] = []
    const mine: bigint[] = []
    for (let s = 0; s < STORES; s++) {
      const hashes = Array.from({ length: BLOCKS }, () => h++)
      const tokenIds = Array.from({ length: BLOCKS * BS }, (_, i) => Number((hashes[0]! * 7919n + BigInt(i) * 104729n) % 150000n))
      // Every third store continues the one before it (a prompt cached over two steps).
      const parent = s % 3 === 1 ? events.at(-1)!.type === 'BlockStored' ? (events.at(-1) as { blockHashes: bigint[] }).blockHashes.at(-1)! : null : null
      events.push({ type: 'BlockStored', blockHashes: hashes, parentBlockHash: parent, tokenIds, blockSize: BS, loraId: null, medium: null, loraName: null, extraKeys: null, groupIdx: null })
      mine.push(...hashes)
    }
    const old = storedAt[b - LAG]
    if (old !== undefined) {
      for (let r = 0; r < REMOVES; r++) events.push({ type: 'BlockRemoved', blockHashes: old.slice(r * BLOCKS, (r + 1) * BLOCKS), medium: null, groupIdx: null })
    }
    storedAt.push(mine)
    out.push({ ts: b, events, dataParallelRank: null })
  }
  return out
}

const router = new Router({ instances: [{ id: ID }], strategy: 'longest_prefix', exactBlockSize: BS })
router.exact.setView(ID, 'fresh')
exactSeed(undefined, undefined)

type Path = (r: Router, id: string, b: KvEventBatch, bs: number, c: ReturnType<typeof newCounts>) => void
function run(path: Path, list: KvEventBatch[]): number {
  const counts = newCounts()
  let events = 0
  for (const b of list) events += b.events.length
  const t0 = process.hrtime.bigint()
  for (const b of list) path(router, ID, b, BS, counts)
  const ns = Number(process.hrtime.bigint() - t0)
  router.exact.clear(ID)
  if (counts.stored === 0) throw new Error('nothing stored')
  return events / (ns / 1e9)
}

const median = (xs: number[]): number => {
  const s = [...xs].sort((a, b) => a - b)
  return s[Math.floor(s.length / 2)]!
}

const perEvent: number[] = []
const batched: number[] = []
for (let round = 0; round < ROUNDS; round++) {
  // Fresh batches each round, made before the clock starts: the two paths see the same ones.
  const list = batches(BigInt(round) << 32n)
  const a = round % 2 === 0 ? run(applyPerEvent, list) : run(applyBatch, list)
  const b = round % 2 === 0 ? run(applyBatch, list) : run(applyPerEvent, list)
  const [pe, ba] = round % 2 === 0 ? [a, b] : [b, a]
  if (round === 0) continue // warm-up
  perEvent.push(pe)
  batched.push(ba)
}
const fmt = (x: number) => `${(x / 1e6).toFixed(3)} M events/s`
console.log(`batches of ${STORES} BlockStored × ${BLOCKS} blocks × ${BS} tokens and ${REMOVES} BlockRemoved; ${BATCHES} batches a round, ${ROUNDS - 1} rounds after a warm-up`)
console.log(`per-event (baseline): ${fmt(median(perEvent))}   [${perEvent.map((x) => (x / 1e6).toFixed(3)).join(', ')}]`)
console.log(`batched:              ${fmt(median(batched))}   [${batched.map((x) => (x / 1e6).toFixed(3)).join(', ')}]`)
console.log(`ratio batched / per-event: ${(median(batched) / median(perEvent)).toFixed(2)}× (per round: ${batched.map((x, i) => (x / perEvent[i]!).toFixed(2)).join(', ')})`)
router.close()
