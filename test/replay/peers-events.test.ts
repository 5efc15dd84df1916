// The event-fed peers' scoring on hand-made KV events: what their index learns from
// BlockStored / BlockRemoved / AllBlocksCleared, and how each turns it and load into a choice.
import { describe, expect, it } from 'vitest'
import type { BlockStoredEvent, KvEvent } from '../../src/fleet/events/types.js'
import { DynamoKv } from '../../src/replay/peers/dynamo-kv.js'
import { KvEventIndex } from '../../src/replay/peers/kv-event-index.js'
import { LlmdPrecise } from '../../src/replay/peers/llmd-precise.js'

const BS = 4
const MODEL = 'm'
/** Tokens of `blocks` blocks of 4, distinct per `base`. */
const tokens = (blocks: number, base = 0): number[] => Array.from({ length: blocks * BS }, (_, i) => base + i + 1)

function stored(hashes: bigint[], parent: bigint | null, ids: number[], extra: unknown[] | null = null): BlockStoredEvent {
  return {
    type: 'BlockStored',
    blockHashes: hashes,
    parentBlockHash: parent,
    tokenIds: ids,
    blockSize: BS,
    loraId: null,
    medium: 'GPU',
    loraName: null,
    extraKeys: extra === null ? null : [extra, ...hashes.slice(1).map(() => null)],
    groupIdx: null,
  }
}

describe('KvEventIndex (the peers’ KV-event-fed index)', () => {
  const prompt = Uint32Array.from(tokens(4))

  it('matches a request’s leading blocks per pod, chained through parents', () => {
    const ix = new KvEventIndex(2, BS, 'test')
    const keys = ix.requestKeys(prompt, ix.seed(MODEL, undefined))
    expect(keys.length).toBe(4)
    ix.apply(0, [stored([10n, 11n], null, tokens(2))], MODEL)
    expect([...ix.longestPrefix(keys, [0, 1])]).toEqual([[0, 2], [1, 0]])
    // The third block continues from engine hash 11n: the chain goes on.
    ix.apply(0, [stored([12n], 11n, tokens(3).slice(8))], MODEL)
    expect(ix.longestPrefix(keys, [0]).get(0)).toBe(3)
    // Other tokens under the same parent are another block: no match for block 4.
    ix.apply(1, [stored([20n, 21n, 22n, 23n], null, tokens(4, 100))], MODEL)
    expect(ix.longestPrefix(keys, [1]).get(1)).toBe(0)
    expect(ix.size(0)).toBe(3)
    expect(ix.size(1)).toBe(4)
  })

  it('forgets removed blocks (a gap ends the prefix), a cleared pod, and skips orphans and misfit blocks', () => {
    const ix = new KvEventIndex(1, BS, 'test')
    const keys = ix.requestKeys(prompt, ix.seed(MODEL, undefined))
    ix.apply(0, [stored([1n, 2n, 3n, 4n], null, tokens(4))], MODEL)
    expect(ix.longestPrefix(keys, [0]).get(0)).toBe(4)
    ix.apply(0, [{ type: 'BlockRemoved', blockHashes: [2n], medium: 'GPU', groupIdx: null }], MODEL)
    expect(ix.longestPrefix(keys, [0]).get(0)).toBe(1)
    // An offloaded copy is not a GPU block: its removal changes nothing here.
    ix.apply(0, [{ type: 'BlockRemoved', blockHashes: [1n], medium: 'CPU', groupIdx: null }], MODEL)
    expect(ix.longestPrefix(keys, [0]).get(0)).toBe(1)
    ix.apply(0, [{ type: 'AllBlocksCleared' }], MODEL)
    expect(ix.longestPrefix(keys, [0]).get(0)).toBe(0)
    expect(ix.size(0)).toBe(0)
    const events: KvEvent[] = [stored([9n], 777n, tokens(1)), { ...stored([8n], null, tokens(1)), tokenIds: [1, 2, 3] }]
    ix.apply(0, events, MODEL)
    expect(ix.skipped).toBe(2)
    expect(ix.size(0)).toBe(0)
    expect(() => ix.apply(3, [], MODEL)).toThrow(/pod must be from 0 to 0; got 3/)
  })

  it('keys a salted prompt apart: the salt on block 0’s extra keys must match the request’s', () => {
    const ix = new KvEventIndex(1, BS, 'test')
    ix.apply(0, [stored([1n, 2n], null, tokens(2), ['tenant-a'])], MODEL)
    expect(ix.longestPrefix(ix.requestKeys(prompt, ix.seed(MODEL, 'tenant-a')), [0]).get(0)).toBe(2)
    expect(ix.longestPrefix(ix.requestKeys(prompt, ix.seed(MODEL, 'tenant-b')), [0]).get(0)).toBe(0)
    expect(ix.longestPrefix(ix.requestKeys(prompt, ix.seed(MODEL, undefined)), [0]).get(0)).toBe(0)
  })
})

/** A scraped engine: vllm:num_requests_waiting and vllm:kv_cache_usage_perc. */
const engine = (waiting: number, usage: number) => ({ numWaiting: waiting, cache: { usage } })

describe('llmd_precise (precise-prefix-cache-scorer 2, kv-cache-utilization 1, queue 1)', () => {
  const prompt = Uint32Array.from(tokens(4))

  it('normalizes the longest cached prefix min-max over the pods holding block 0', () => {
    const r = new LlmdPrecise({ members: [0, 1, 2], model: MODEL, seed: 1, blockSize: BS, engines: [engine(0, 0), engine(0, 0), engine(0, 0)] })
    const keys = r.index.requestKeys(prompt, r.index.seed(MODEL, undefined))
    r.kvEvents(0, [stored([1n, 2n], null, tokens(2))])
    // One pod holds a prefix: it scores 1 (min = max), the others 0.
    expect([...r.prefixScores(keys)]).toEqual([[0, 1]])
    r.kvEvents(1, [stored([5n, 6n, 7n, 8n], null, tokens(4))])
    // 2 and 4 blocks: 0 and 1; the pod holding 2 blocks scores as one holding none.
    expect(new Map(r.prefixScores(keys))).toEqual(new Map([[0, 0], [1, 1]]))
    r.kvEvents(0, [stored([3n, 4n], 2n, tokens(4).slice(8))])
    expect(new Map(r.prefixScores(keys))).toEqual(new Map([[0, 1], [1, 1]]))
  })

  it('adds the weighted KV and queue scores from the scrape and picks the maximum', () => {
    // Pod 0 holds the prompt but is loaded; pod 1 is idle and holds nothing.
    const busy = engine(4, 0.9)
    const idle = engine(0, 0)
    const r = new LlmdPrecise({ members: [0, 1], model: MODEL, seed: 1, blockSize: BS, engines: [busy, idle] })
    r.kvEvents(0, [stored([1n, 2n, 3n, 4n], null, tokens(4))])
    // 2 × 1 + 1 × 0.1 + 1 × 0 = 2.1 against 0 + 1 × 1 + 1 × 1 = 2: the prefix wins.
    expect(r.routeTokens(prompt, 0).instance).toBe(0)
    // A full cache and the longest queue: 2 + 0 + 0 against 2, a tie, drawn at random.
    busy.cache.usage = 1
    const picks = new Set<number>()
    for (let t = 100; t < 2000; t += 100) picks.add(r.routeTokens(prompt, t).instance)
    expect(picks).toEqual(new Set([0, 1]))
    // Metrics are read at most every 50 ms: a change within that window is not seen yet.
    busy.numWaiting = 0
    busy.cache.usage = 0.5
    const r2 = new LlmdPrecise({ members: [0, 1], model: MODEL, seed: 1, blockSize: BS, engines: [busy, engine(0, 0)] })
    r2.kvEvents(0, [stored([1n, 2n, 3n, 4n], null, tokens(4))])
    expect(r2.routeTokens(prompt, 0).instance).toBe(0) // 2 + 0.5 + 1 against 0 + 1 + 1
    busy.numWaiting = 100
    busy.cache.usage = 1
    expect(r2.routeTokens(prompt, 10).instance).toBe(0) // still the reading of t = 0
  })
})

describe('dynamo_kv (overlap weight 1 × prefill blocks + decode blocks, lowest wins)', () => {
  const prompt = Uint32Array.from(tokens(4)) // 16 tokens, 4 blocks

  it('costs prefill after the overlap plus the active blocks it would add', () => {
    const r = new DynamoKv({ members: [0, 1], model: MODEL, seed: 1, blockSize: BS, engines: [{}, {}] })
    r.kvEvents(1, [stored([1n, 2n, 3n], null, tokens(3))])
    // Worker 0: 16/4 + (4 new + 0 active) = 8; worker 1: (16 − 12)/4 + (4 + 0) = 5.
    const a = r.routeTokens(prompt)
    expect(a.instance).toBe(1)
    expect(r.load(1)).toEqual({ activeTokens: 4, activeBlocks: 4 })
    // The same prompt again: worker 1 now 1 + 4/4 + (0 new + 4) = 6 < 8.
    const b = r.routeTokens(prompt)
    expect(b.instance).toBe(1)
    expect(r.load(1)).toEqual({ activeTokens: 8, activeBlocks: 4 })
    // A different prompt: worker 0 costs 4 + 4 = 8, worker 1 4 + 8/4 + (4 + 4) = 14.
    const other = Uint32Array.from(tokens(4, 500))
    const c = r.routeTokens(other)
    expect(c.instance).toBe(0)
    // Prefill done (first token): its tokens leave the count; the end frees its blocks.
    a.firstToken!()
    expect(r.load(1)).toEqual({ activeTokens: 4, activeBlocks: 4 })
    a.finish()
    b.finish()
    b.finish()
    expect(r.load(1)).toEqual({ activeTokens: 0, activeBlocks: 0 })
    c.finish()
    expect(r.load(0)).toEqual({ activeTokens: 0, activeBlocks: 0 })
  })

  it('breaks ties by the smaller tree', () => {
    const r = new DynamoKv({ members: [0, 1], model: MODEL, seed: 1, blockSize: BS, engines: [{}, {}] })
    r.kvEvents(0, [stored([7n, 8n], null, tokens(2, 900))])
    // Neither holds the prompt: equal cost, worker 1's tree is smaller.
    expect(r.routeTokens(prompt).instance).toBe(1)
  })
})
