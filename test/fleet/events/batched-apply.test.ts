// applyBatch hands a whole batch to the native side in one call. Against the per-event path it
// replaced (one native call per event, per-event-apply.ts), the same batches leave the same
// index: the same counts, the same blocks per instance and tier, the same matches for every
// prompt stored, and the same index statistics.
import fc from 'fast-check'
import { afterEach, describe, expect, it } from 'vitest'
import { ExactBatch } from '../../../src/core/exact-batch.js'
import { exactSeed } from '../../../src/core/exact-seed.js'
import { Router } from '../../../src/core/router.js'
import { applyBatch, newCounts, type ApplyCounts } from '../../../src/fleet/events/apply.js'
import type { EngineBlockHash, KvEvent, KvEventBatch } from '../../../src/fleet/events/types.js'
import { applyPerEvent } from './per-event-apply.js'

const BS = 4
const IDS = ['a', 'b']
const open: Router[] = []
afterEach(() => {
  for (const r of open.splice(0)) r.close()
})

function router(capacity = 1 << 20): Router {
  const r = new Router({ instances: IDS.map((id) => ({ id })), strategy: 'longest_prefix', exactBlockSize: BS, exactCapacity: Math.max(1024, capacity) })
  for (const id of IDS) r.exact.setView(id, 'fresh')
  open.push(r)
  return r
}

const stored = (blockHashes: EngineBlockHash[], parent: EngineBlockHash | null, tokenIds: number[], more: Partial<Extract<KvEvent, { type: 'BlockStored' }>> = {}): KvEvent => ({
  type: 'BlockStored',
  blockHashes,
  parentBlockHash: parent,
  tokenIds,
  blockSize: BS,
  loraId: null,
  medium: null,
  loraName: null,
  extraKeys: null,
  groupIdx: null,
  ...more,
})
const removed = (blockHashes: EngineBlockHash[], medium: string | null = null): KvEvent => ({ type: 'BlockRemoved', blockHashes, medium, groupIdx: null })
const batchOf = (events: KvEvent[]): KvEventBatch => ({ ts: 1, events, dataParallelRank: null })
const ids = (from: number, blocks: number): number[] => Array.from({ length: blocks * BS }, (_, i) => from + i)

/** Everything the index holds that a pick or an operator can read, per instance. */
function state(r: Router, prompts: { ids: number[]; seed: bigint }[]) {
  const s = r.stats()
  return {
    instances: IDS.map((id) => r.exact.instance(id)),
    matches: prompts.map((p) => r.exact.match(Uint32Array.from(p.ids), p.seed, 0)),
    stats: { entries: s.exactEntries, dropped: s.exactDropped, orphans: s.exactOrphans, memory: s.exactMemoryBytes },
  }
}

function both(batches: { instance: string; batch: KvEventBatch }[], prompts: { ids: number[]; seed: bigint }[], capacity?: number) {
  const one = router(capacity)
  const each = router(capacity)
  const c1: ApplyCounts = newCounts()
  const c2: ApplyCounts = newCounts()
  for (const { instance, batch } of batches) {
    applyBatch(one, instance, batch, BS, c1)
    applyPerEvent(each, instance, batch, BS, c2)
  }
  return { batched: { counts: c1, ...state(one, prompts) }, perEvent: { counts: c2, ...state(each, prompts) } }
}

describe('applyBatch: one native call per batch', () => {
  it('applies a batch of stores, removes and clears as the per-event path did', () => {
    const lora = 'adapter'
    const events: KvEvent[] = [
      stored([1n, 2n, 3n], null, ids(0, 3)),
      stored([4n, 5n], 3n, ids(12, 2)), // continues the chain
      stored([new Uint8Array([9, 9]), 7n], null, ids(100, 2), { medium: 'CPU' }), // bytes hashes, offloaded
      stored([8n], 99n, ids(200, 1)), // orphan: its parent is unknown
      stored([10n, 11n], null, ids(300, 2), { loraName: lora, extraKeys: [[lora, 'salt-1'], [lora]] }), // LoRA and cache_salt
      stored([12n, 13n], null, ids(400, 2), { extraKeys: [null, [{ mm: 1 }]] }), // extra keys end the run after block 0
      stored([14n], null, ids(500, 1), { blockSize: 8, tokenIds: ids(500, 2) }), // another block size
      stored([15n], null, ids(600, 1), { groupIdx: 1 }), // another KV-cache group
      stored([16n, 17n], null, ids(700, 1)), // malformed: too few tokens
      removed([2n, 3n, 42n]),
      removed([new Uint8Array([9, 9])], 'CPU'),
      { type: 'AllBlocksCleared' },
      stored([20n, 21n], null, ids(800, 2)),
      removed([21n]),
    ]
    const prompts = [
      { ids: ids(0, 5), seed: exactSeed(undefined, undefined) },
      { ids: ids(300, 2), seed: exactSeed(lora, 'salt-1') },
      { ids: ids(800, 2), seed: exactSeed(undefined, undefined) },
      { ids: ids(100, 2), seed: exactSeed(undefined, undefined) },
    ]
    // Before the clear, and after it, and on a second instance and a non-member.
    const before = events.slice(0, 11)
    const { batched, perEvent } = both(
      [
        { instance: 'a', batch: batchOf(before) },
        { instance: 'b', batch: batchOf(before) },
        { instance: 'a', batch: batchOf(events.slice(11)) },
        { instance: 'gone', batch: batchOf(before.slice(0, 2)) },
      ],
      prompts,
    )
    expect(batched).toEqual(perEvent)
    // The batch did what it says: blocks held by b, a cleared then refilled, refusals counted.
    expect(batched.instances[1]).toMatchObject({ gpuBlocks: 6, offloadedBlocks: 1 })
    expect(batched.instances[0]).toMatchObject({ gpuBlocks: 1, offloadedBlocks: 0 })
    expect(batched.counts).toMatchObject({ cleared: 1, skipped: { orphan: 2, not_member: 5, extra_keys: 2, block_size: 2, group: 2, malformed: 4 } })
    expect(batched.matches[0]![1]!.blocks).toBe(1)
  })

  it('leaves the same index as the per-event path for any sequence of batches', () => {
    const hash = fc.oneof({ weight: 6, arbitrary: fc.bigInt({ min: 0n, max: 40n }) }, { weight: 1, arbitrary: fc.constantFrom(new Uint8Array([1]), new Uint8Array([2, 3])) })
    const event: fc.Arbitrary<KvEvent> = fc.oneof(
      {
        weight: 6,
        arbitrary: fc
          .record({
            hashes: fc.array(hash, { minLength: 1, maxLength: 5 }),
            parent: fc.option(hash, { nil: null }),
            base: fc.integer({ min: 0, max: 3 }),
            medium: fc.constantFrom(null, 'GPU', 'CPU'),
            lora: fc.constantFrom(null, 'ad'),
            odd: fc.constantFrom('none', 'none', 'none', 'group', 'size', 'short'),
          })
          .map(({ hashes, parent, base, medium, lora, odd }) =>
            stored(hashes, parent, ids(base * 64, hashes.length), {
              medium,
              loraName: lora,
              ...(odd === 'group' ? { groupIdx: 1 } : odd === 'size' ? { blockSize: 2, tokenIds: ids(0, hashes.length).slice(0, hashes.length * 2) } : {}),
              ...(odd === 'short' ? { tokenIds: ids(0, hashes.length).slice(1) } : {}),
            }),
          ),
      },
      { weight: 3, arbitrary: fc.record({ hashes: fc.array(hash, { maxLength: 4 }), medium: fc.constantFrom(null, 'CPU') }).map(({ hashes, medium }) => removed(hashes, medium)) },
      { weight: 1, arbitrary: fc.constant<KvEvent>({ type: 'AllBlocksCleared' }) },
    )
    const batches = fc.array(fc.record({ instance: fc.constantFrom('a', 'b', 'x'), events: fc.array(event, { maxLength: 12 }) }), { minLength: 1, maxLength: 12 })
    const prompts = [0, 1, 2, 3].flatMap((base) => [undefined, 'ad'].map((lora) => ({ ids: ids(base * 64, 5), seed: exactSeed(lora, undefined) })))
    fc.assert(
      fc.property(batches, fc.constantFrom(1024, 1 << 20), (list, capacity) => {
        const { batched, perEvent } = both(
          list.map((b) => ({ instance: b.instance, batch: batchOf(b.events) })),
          prompts,
          capacity,
        )
        expect(batched).toEqual(perEvent)
        for (const r of open.splice(0)) r.close()
      }),
      { numRuns: 150, seed: 20261204 },
    )
  })

  it('refuses a batch whose op is owed engine hashes, and applies nothing of it', () => {
    const r = router()
    const b = new ExactBatch().reset(BS)
    b.store(null, 1n, 0, 2, ids(0, 2))
    b.hash(5n)
    expect(() => r.exact.apply('a', b)).toThrow(/owed 1 engine hashes/)
    expect(() => b.clear()).toThrow(/owed 1 engine hashes/)
    expect(r.exact.instance('a')).toMatchObject({ gpuBlocks: 0 })
  })
})
