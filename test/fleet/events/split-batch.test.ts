// A large batch applied in pieces gives the index what the whole batch gives it.
import { describe, expect, it } from 'vitest'
import { exactSeed } from '../../../src/core/exact-seed.js'
import { Router } from '../../../src/core/router.js'
import { applyBatch, newCounts } from '../../../src/fleet/events/apply.js'
import { batchBlocks, splitBatch } from '../../../src/fleet/events/split-batch.js'
import type { BlockStoredEvent, KvEventBatch } from '../../../src/fleet/events/types.js'

const BS = 4
function stored(first: number, n: number, parent: bigint | null, o: Partial<BlockStoredEvent> = {}): BlockStoredEvent {
  return {
    type: 'BlockStored',
    blockHashes: Array.from({ length: n }, (_, i) => BigInt(first + i)),
    parentBlockHash: parent,
    tokenIds: Array.from({ length: n * BS }, (_, i) => (first * BS + i) % 1000),
    blockSize: BS,
    loraId: null,
    medium: 'GPU',
    loraName: null,
    extraKeys: null,
    groupIdx: null,
    ...o,
  }
}

function held(b: KvEventBatch[], probe: number[][]): number[] {
  const r = new Router({ instances: [{ id: 'a' }], strategy: 'longest_prefix', exactBlockSize: BS })
  r.exact.setView('a', 'fresh')
  const c = newCounts()
  for (const x of b) applyBatch(r, 'a', x, BS, c)
  return probe.map((tokens) => r.exact.match(Uint32Array.from(tokens), exactSeed(undefined, undefined)).find((m) => m.instance === 'a')?.blocks ?? 0)
}

describe('splitBatch', () => {
  const batch: KvEventBatch = {
    ts: 1,
    dataParallelRank: 0,
    events: [
      stored(1, 50, null),
      { type: 'BlockRemoved', blockHashes: Array.from({ length: 30 }, (_, i) => BigInt(21 + i)), medium: 'GPU', groupIdx: null },
      stored(100, 7, null, { loraName: null, extraKeys: Array.from({ length: 7 }, () => null) }),
      { type: 'AllBlocksCleared' },
      stored(200, 33, null),
    ],
  }

  it('cuts into pieces of at most maxBlocks blocks, in order, chains continued from the last block', () => {
    const pieces = splitBatch(batch, 8)
    expect(pieces.length).toBeGreaterThan(10)
    for (const p of pieces) expect(batchBlocks(p)).toBeLessThanOrEqual(8)
    const firsts = pieces.flatMap((p) => p.events).filter((e): e is BlockStoredEvent => e.type === 'BlockStored')
    expect(firsts.flatMap((e) => e.blockHashes)).toEqual(batch.events.flatMap((e) => (e.type === 'BlockStored' ? e.blockHashes : [])))
    for (const e of firsts) expect(e.tokenIds).toHaveLength(e.blockHashes.length * BS)
    expect(firsts[1]!.parentBlockHash).toBe(8n) // the first piece's last block
    expect(splitBatch(batch, 10_000)).toEqual([batch])
  })

  it('the pieces leave the index as the whole batch does', () => {
    const tokens = (first: number, n: number) => Array.from({ length: n * BS }, (_, i) => (first * BS + i) % 1000)
    const probe = [tokens(1, 50), tokens(200, 33), tokens(100, 7)]
    const pre: KvEventBatch = { ts: 0, dataParallelRank: 0, events: [stored(1, 50, null)] }
    const all = held([pre, { ...batch, events: batch.events.slice(0, 3) }], probe)
    expect(held([pre, ...splitBatch({ ...batch, events: batch.events.slice(0, 3) }, 8)], probe)).toEqual(all)
    expect([all[0]! > 0, all[2]! > 0]).toEqual([true, true]) // (the third event is not in this part)
    expect(held([...splitBatch(batch, 8)], probe)).toEqual(held([batch], probe))
  })
})
