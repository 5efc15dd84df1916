// The engine's KV events in virtual time: what a BlockStored carries (hashes = block keys,
// the very tokens hashed into them, extra keys), evictions, resets, restarts.
import { describe, expect, it } from 'vitest'
import type { BlockStoredEvent, KvEvent } from '../../src/fleet/events/types.js'
import { xxh3Blocks } from '../../src/core/hash.js'
import { blockKey, cacheSeed, encodeTokenIds, tokenIdsOf, VirtualFleet } from '../../src/sim/index.js'
import { o200kCache } from '../../src/tokens/o200k.js'
import { promptOf } from './helpers.js'

function collect(fleet: VirtualFleet, i = 0): { batches: { events: KvEvent[]; at: number }[]; all: () => KvEvent[] } {
  const batches: { events: KvEvent[]; at: number }[] = []
  fleet.engines[i]!.setKvEventListener((events, at) => batches.push({ events, at }))
  return { batches, all: () => batches.flatMap((b) => b.events) }
}

const stored = (evs: KvEvent[]): BlockStoredEvent[] => evs.filter((e): e is BlockStoredEvent => e.type === 'BlockStored')

describe('SimEngine KV events', () => {
  it('a prompt stores each full block once, with its key, its parent and the tokens hashed into it', () => {
    const fleet = new VirtualFleet({ instances: 1, profile: 'tiny', kvEvents: true })
    const { all } = collect(fleet)
    const text = promptOf(200, 'stored') // 800 bytes: 12 full blocks of 16 tokens
    const prepared = fleet.prepare({ text })
    fleet.submit(0, { prepared, maxTokens: 2 })
    fleet.run()
    const ev = stored(all())
    const hashes = ev.flatMap((e) => e.blockHashes)
    expect(hashes).toEqual([...prepared.blockKeys].map((k) => BigInt(k)))
    expect(hashes.length).toBe(12)
    const bytes = new TextEncoder().encode(text)
    const ids = [...tokenIdsOf(bytes)]
    let next = 0
    for (const e of ev) {
      expect(e.parentBlockHash).toBe(next === 0 ? null : BigInt(prepared.blockKeys[next - 1]!))
      expect(e.blockSize).toBe(16)
      expect(e.medium).toBe('GPU')
      expect(e.loraName).toBeNull()
      expect(e.extraKeys).toBeNull()
      expect(e.tokenIds).toEqual(ids.slice(next * 16, (next + e.blockHashes.length) * 16))
      next += e.blockHashes.length
    }
    // The published tokens, written back as 4 little-endian bytes each and chained, give the
    // engine's keys: they are exactly what the engine hashed.
    const tokens = ev.flatMap((e) => e.tokenIds)
    const rehashed = [...xxh3Blocks(encodeTokenIds(tokens), 16 * 4, cacheSeed('sim-tiny'))].map(blockKey)
    expect(rehashed).toEqual([...prepared.blockKeys])
  })

  it('token-id prompts publish their ids; a LoRA name is on every block and cache_salt on block 0', () => {
    const fleet = new VirtualFleet({ instances: 1, profile: 'tiny', loras: ['ad'], kvEvents: true })
    const { all } = collect(fleet)
    const ids = Array.from({ length: 40 }, (_, i) => 1000 + i * 7)
    fleet.submit(0, { tokenIds: ids, model: 'ad', cacheSalt: 'tenant', maxTokens: 1 })
    fleet.run()
    const ev = stored(all())
    expect(ev.flatMap((e) => e.tokenIds)).toEqual(ids.slice(0, 32))
    expect(ev.every((e) => e.loraName === 'ad' && e.loraId === 1)).toBe(true)
    expect(ev.flatMap((e) => e.extraKeys ?? [])).toEqual([['ad', 'tenant'], ['ad']])
  })

  it('under a tiny cache, reused blocks are reported removed and the events track the cache', () => {
    const fleet = new VirtualFleet({ instances: 1, profile: 'tiny', kvBlocks: 16, kvEvents: true })
    const { all } = collect(fleet)
    for (let i = 0; i < 6; i++) fleet.submit(0, { text: promptOf(100, `evict${i}`), maxTokens: 1 }, { at: i * 100 })
    fleet.run()
    const view = new Set<bigint>()
    for (const e of all()) {
      if (e.type === 'BlockStored') for (const h of e.blockHashes) view.add(h as bigint)
      else if (e.type === 'BlockRemoved') for (const h of e.blockHashes) expect(view.delete(h as bigint)).toBe(true)
      else view.clear()
    }
    expect(all().some((e) => e.type === 'BlockRemoved')).toBe(true)
    expect([...view].sort()).toEqual(fleet.engines[0]!.cache.cachedKeys().map((k) => BigInt(k)).sort())
  })

  it('resetPrefixCache clears with AllBlocksCleared; restart empties the cache without an event', () => {
    const fleet = new VirtualFleet({ instances: 1, profile: 'tiny', kvEvents: true })
    const { all, batches } = collect(fleet)
    const e = fleet.engines[0]!
    fleet.submit(0, { text: promptOf(100, 'reset'), maxTokens: 1 })
    fleet.run()
    expect(e.cache.cachedBlocks).toBeGreaterThan(0)
    expect(e.resetPrefixCache()).toBe(true)
    expect(all().at(-1)).toEqual({ type: 'AllBlocksCleared' })
    expect(e.cache.cachedBlocks).toBe(0)

    fleet.submit(0, { text: promptOf(100, 'restart'), maxTokens: 1 })
    fleet.run()
    const before = batches.length
    expect(e.cache.cachedBlocks).toBeGreaterThan(0)
    e.restart()
    expect(e.cache.cachedBlocks).toBe(0)
    expect(batches.length).toBe(before)
    let finished = ''
    fleet.submit(0, { text: promptOf(100, 'restart'), maxTokens: 1 }, { onFinish: (r) => (finished = r.finishReason) })
    fleet.run()
    expect(finished).not.toBe('abort')
    expect(stored(batches.slice(before).flatMap((b) => b.events)).length).toBeGreaterThan(0)
  })

  it('restart aborts what is in flight', () => {
    const fleet = new VirtualFleet({ instances: 1, profile: 'tiny', kvEvents: true })
    const e = fleet.engines[0]!
    let reason = ''
    fleet.submit(0, { text: promptOf(100, 'inflight'), maxTokens: 50 }, { onFinish: (r) => (reason = r.finishReason) })
    fleet.run(10)
    expect(e.inFlight).toBe(1)
    e.restart()
    expect(reason).toBe('abort')
    expect(e.inFlight).toBe(0)
  })

  it('under o200k the published tokens are the BPE ids', () => {
    const fleet = new VirtualFleet({ instances: 1, profile: 'tiny', tokenizer: 'o200k', kvEvents: true })
    const { all } = collect(fleet)
    const text = 'The quick brown fox jumps over the lazy dog. '.repeat(12)
    fleet.submit(0, { text, maxTokens: 1 })
    fleet.run()
    const ids = [...o200kCache().encode(text)]
    const published = stored(all()).flatMap((e) => e.tokenIds)
    expect(published.length).toBe(Math.floor(ids.length / 16) * 16)
    expect(published).toEqual(ids.slice(0, published.length))
  })

  it('without kvEvents no token ids are kept', () => {
    const fleet = new VirtualFleet({ instances: 1, profile: 'tiny' })
    expect(fleet.prepare({ text: promptOf(50, 'x') }).tokenIds).toBeUndefined()
  })
})
