// Applies one instance's decoded KV events to the router's exact index. What the router
// cannot reproduce is left out rather than guessed: blocks of another KV-cache group (hybrid
// models), blocks carrying extra keys beyond the LoRA name and cache_salt (multimodal inputs,
// prompt embeddings: the router's tokens do not include them), and blocks of another block
// size. Leaving a block out only undercounts what an instance holds; a wrong block would
// attract traffic to an instance that cannot serve it from cache.
import { ABI } from '../../core/abi.js'
import { ExactBatch } from '../../core/exact-batch.js'
import { exactSeed } from '../../core/exact-seed.js'
import type { Router } from '../../core/router.js'
import { engineHashKey } from './engine-hash.js'
import { mediumTier, type BlockStoredEvent, type KvEventBatch } from './types.js'

/** Why events or blocks were not applied (the `reason` label of the skipped-events metric). */
export type SkipReason = 'orphan' | 'group' | 'extra_keys' | 'block_size' | 'capacity' | 'malformed' | 'not_member'

export interface ApplyCounts {
  stored: number
  removed: number
  cleared: number
  skipped: Partial<Record<SkipReason, number>>
}

export const newCounts = (): ApplyCounts => ({ stored: 0, removed: 0, cleared: 0, skipped: {} })

function skip(c: ApplyCounts, why: SkipReason, n = 1): void {
  c.skipped[why] = (c.skipped[why] ?? 0) + n
}

/**
 * The cache_salt of a chain's first block, and how many leading blocks the router can
 * reproduce: vLLM's extra keys are the LoRA name (every block), multimodal ids, then
 * cache_salt (block 0 only). A block with anything else ends the run.
 */
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
    // cache_salt: a single string after the LoRA name, on the first block of a chain only.
    if (b === 0 && ev.parentBlockHash === null && rest.length === 1 && typeof rest[0] === 'string') {
      salt = rest[0]
      continue
    }
    return { salt, blocks: b }
  }
  return { salt, blocks: n }
}

// What each op of the native batch was, to count its result: a store's blocks (by its
// result), or a remove (-1), or a clear (-2).
const REMOVE = -1
const CLEAR = -2
const { orphan: ORPHAN, notMember: NOT_MEMBER, blockSize: BLOCK_SIZE } = ABI.exact
// One batch in flight at a time (applying is synchronous): its arrays are reused.
const ops = new ExactBatch()
let kinds: number[] = []

/**
 * Applies a batch's events to the exact index in one native call: the events the router can
 * reproduce go into one ExactBatch, in order, and each op's result is counted as the
 * per-event calls' results were.
 */
export function applyBatch(router: Router, instance: string, batch: KvEventBatch, blockSize: number, counts: ApplyCounts): void {
  ops.reset(blockSize)
  kinds.length = 0
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
        const parent = ev.parentBlockHash === null ? null : engineHashKey(ev.parentBlockHash)
        ops.store(parent, exactSeed(ev.loraName ?? undefined, salt), mediumTier(ev.medium), blocks, ev.tokenIds)
        for (let b = 0; b < blocks; b++) ops.hash(engineHashKey(ev.blockHashes[b]!))
        kinds.push(blocks)
        break
      }
      case 'BlockRemoved': {
        if (ev.groupIdx !== null && ev.groupIdx !== 0) {
          skip(counts, 'group', ev.blockHashes.length)
          break
        }
        ops.remove(mediumTier(ev.medium), ev.blockHashes.length)
        for (const h of ev.blockHashes) ops.hash(engineHashKey(h))
        kinds.push(REMOVE)
        break
      }
      case 'AllBlocksCleared':
        ops.clear()
        kinds.push(CLEAR)
        break
    }
  }
  if (ops.length === 0) return
  const results = router.exact.apply(instance, ops)
  for (let i = 0; i < kinds.length; i++) {
    const kind = kinds[i]!
    const r = results[i]!
    if (kind === CLEAR) counts.cleared++
    else if (kind === REMOVE) counts.removed += Math.max(0, r)
    else if (r >= 0) counts.stored += r
    else if (r === ORPHAN) skip(counts, 'orphan', kind)
    else if (r === NOT_MEMBER) skip(counts, 'not_member', kind)
    else if (r === BLOCK_SIZE) skip(counts, 'block_size', kind)
    else skip(counts, 'capacity', kind)
  }
  // A hostile batch's list is not kept past it.
  if (kinds.length > 4096) kinds = []
}
