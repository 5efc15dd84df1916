// Applies one instance's decoded KV events to the router's exact index. What the router
// cannot reproduce is left out rather than guessed: blocks of another KV-cache group (hybrid
// models), blocks carrying extra keys beyond the LoRA name and cache_salt (multimodal inputs,
// prompt embeddings: the router's tokens do not include them), and blocks of another block
// size. Leaving a block out only undercounts what an instance holds; a wrong block would
// attract traffic to an instance that cannot serve it from cache.
import { exactSeed } from '../../core/exact-seed.js'
import type { Router } from '../../core/router.js'
import { engineHashKey, engineHashKeys } from './engine-hash.js'
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

export function applyBatch(router: Router, instance: string, batch: KvEventBatch, blockSize: number, counts: ApplyCounts): void {
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
        const r = router.exactStore(instance, parent, engineHashKeys(ev.blockHashes, blocks), tokens, blockSize, seed, mediumTier(ev.medium))
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
        counts.removed += router.exactRemove(instance, engineHashKeys(ev.blockHashes), mediumTier(ev.medium))
        break
      }
      case 'AllBlocksCleared':
        router.exactClear(instance)
        counts.cleared++
        break
    }
  }
}
