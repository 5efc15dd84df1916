// A batch cut into pieces of at most `maxBlocks` blocks, so that applying a large one (a long
// prompt's prefill in one engine step, or a hostile publisher's) takes several short turns of
// the event loop instead of one long one. A BlockStored cut in two is what vLLM itself sends
// for a chain cached over two steps: the second part's parent is the first part's last block.
// The pieces are applied in order, so the index ends up as it would from the whole batch
// (but for the count reason of blocks after an extra-keys run ends: orphan instead of
// extra_keys, both skipped).
import type { BlockRemovedEvent, BlockStoredEvent, KvEvent, KvEventBatch } from './types.js'

/** Blocks an event names: what applying it costs. */
export function blocksOf(ev: KvEvent): number {
  return ev.type === 'AllBlocksCleared' ? 1 : ev.blockHashes.length
}

export function batchBlocks(b: KvEventBatch): number {
  let n = 0
  for (const ev of b.events) n += blocksOf(ev)
  return n
}

function* cut(ev: KvEvent, maxBlocks: number): Generator<KvEvent> {
  if (ev.type === 'AllBlocksCleared' || ev.blockHashes.length <= maxBlocks) {
    yield ev
    return
  }
  const n = ev.blockHashes.length
  if (ev.type === 'BlockRemoved') {
    for (let i = 0; i < n; i += maxBlocks) yield { ...ev, blockHashes: ev.blockHashes.slice(i, i + maxBlocks) } satisfies BlockRemovedEvent
    return
  }
  const bs = ev.blockSize
  for (let i = 0; i < n; i += maxBlocks) {
    const end = Math.min(n, i + maxBlocks)
    yield {
      ...ev,
      blockHashes: ev.blockHashes.slice(i, end),
      parentBlockHash: i === 0 ? ev.parentBlockHash : ev.blockHashes[i - 1]!,
      tokenIds: ev.tokenIds.slice(i * bs, end * bs),
      extraKeys: ev.extraKeys === null ? null : ev.extraKeys.slice(i, end),
    } satisfies BlockStoredEvent
  }
}

/** The batch itself when it is small enough, else pieces of at most maxBlocks blocks each (an event of more is cut). */
export function splitBatch(b: KvEventBatch, maxBlocks: number): KvEventBatch[] {
  if (batchBlocks(b) <= maxBlocks) return [b]
  const out: KvEventBatch[] = []
  let events: KvEvent[] = []
  let blocks = 0
  for (const ev of b.events) {
    for (const piece of cut(ev, maxBlocks)) {
      const k = blocksOf(piece)
      if (blocks + k > maxBlocks && events.length > 0) {
        out.push({ ts: b.ts, events, dataParallelRank: b.dataParallelRank })
        events = []
        blocks = 0
      }
      events.push(piece)
      blocks += k
    }
  }
  if (events.length > 0) out.push({ ts: b.ts, events, dataParallelRank: b.dataParallelRank })
  return out
}
