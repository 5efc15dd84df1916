// The event path as it was before batches went to the native side in one call: one native
// call per event (ExactIndex.store, remove, clear), each event's arrays made for it. Kept as
// the reference the batched applyBatch is tested (batched-apply.test.ts) and measured
// (bench/kv-apply.bench.ts) against.
import { exactSeed } from '../../../src/core/exact-seed.js'
import type { Router } from '../../../src/core/router.js'
import type { ApplyCounts, SkipReason } from '../../../src/fleet/events/apply.js'
import { engineHashKey, engineHashKeys } from '../../../src/fleet/events/engine-hash.js'
import { mediumTier, type BlockStoredEvent, type KvEventBatch } from '../../../src/fleet/events/types.js'

function skip(c: ApplyCounts, why: SkipReason, n = 1): void {
  c.skipped[why] = (c.skipped[why] ?? 0) + n
}

function reproducible(ev: BlockStoredEvent): { salt: string | undefined; blocks: number } {
  const n = ev.blockHashes.length
  const keys = ev.extraKeys
  if (keys === null) return { salt: undefined, blocks: n }
  let salt: string | undefined
  for (let b = 0; b < n; b++) {
    const k = keys[b] ?? null
    if (k === null || k.length === 0) continue
    let rest = k
    if (ev.loraName !== null && rest[0] === ev.loraName) rest = rest.slice(1)
    if (rest.length === 0) continue
    if (b === 0 && ev.parentBlockHash === null && rest.length === 1 && typeof rest[0] === 'string') {
      salt = rest[0]
      continue
    }
    return { salt, blocks: b }
  }
  return { salt, blocks: n }
}

export function applyPerEvent(router: Router, instance: string, batch: KvEventBatch, blockSize: number, counts: ApplyCounts): void {
  for (const ev of batch.events) {
    switch (ev.type) {
      case 'BlockStored': {
        if (ev.groupIdx !== null && ev.groupIdx !== 0) {
          skip(counts, 'group', ev.blockHashes.length)
          break
        }
        if (ev.blockSize !== blockSize) {
          skip(counts, 'block_size', ev.blockHashes.length)
          break
        }
        if (ev.tokenIds.length !== ev.blockHashes.length * ev.blockSize) {
          skip(counts, 'malformed', ev.blockHashes.length)
          break
        }
        const { salt, blocks } = reproducible(ev)
        if (blocks < ev.blockHashes.length) skip(counts, 'extra_keys', ev.blockHashes.length - blocks)
        if (blocks === 0) break
        const tokens = Uint32Array.from(ev.tokenIds.length === blocks * blockSize ? ev.tokenIds : ev.tokenIds.slice(0, blocks * blockSize))
        const parent = ev.parentBlockHash === null ? null : engineHashKey(ev.parentBlockHash)
        const seed = exactSeed(ev.loraName ?? undefined, salt)
        const r = router.exact.store(instance, parent, engineHashKeys(ev.blockHashes, blocks), tokens, blockSize, seed, mediumTier(ev.medium))
        if (r >= 0) counts.stored += r
        else if (r === -1) skip(counts, 'orphan', blocks)
        else if (r === -2) skip(counts, 'not_member', blocks)
        else if (r === -3) skip(counts, 'block_size', blocks)
        else skip(counts, 'capacity', blocks)
        break
      }
      case 'BlockRemoved': {
        if (ev.groupIdx !== null && ev.groupIdx !== 0) {
          skip(counts, 'group', ev.blockHashes.length)
          break
        }
        counts.removed += router.exact.remove(instance, engineHashKeys(ev.blockHashes), mediumTier(ev.medium))
        break
      }
      case 'AllBlocksCleared':
        router.exact.clear(instance)
        counts.cleared++
        break
    }
  }
}
