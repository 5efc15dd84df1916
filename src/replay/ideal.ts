// The ideal hit rate: every distinct block computed once per fleet, given its capacity.
//
// Precisely: the token hit rate of ONE prefix cache as large as the whole fleet (the sum
// of the instances' KV blocks) that sees every request in arrival order, with vLLM's
// accounting (leading full blocks only; the last prompt token always computed) and LRU
// eviction, each request's blocks freed as soon as it is admitted. No router can place a
// block on two instances and do better on that block; what it can lose is duplication
// (the same block on several instances takes several slots), imbalance (a hot instance
// evicts while another has room) and overflow. Running requests pinning blocks is not
// counted against the ideal, so a real fleet can approach it but rarely reach it.
import type { PreparedPrompt } from '../sim/block-hash.js'
import { KvCache } from '../sim/kv-cache.js'

export class IdealCache {
  private readonly cache: KvCache
  private readonly slots: number[] = []
  private readonly found = { hits: 0, freeHits: 0 }
  promptTokens = 0
  cachedTokens = 0

  constructor(
    capacityBlocks: number,
    private readonly blockSize: number,
  ) {
    this.cache = new KvCache(capacityBlocks)
  }

  observe(p: PreparedPrompt): void {
    const bs = this.blockSize
    const limit = Math.floor((p.promptTokens - 1) / bs)
    this.cache.lookup(p.blockKeys, limit, this.found)
    const hits = this.found.hits
    this.promptTokens += p.promptTokens
    this.cachedTokens += hits * bs
    const need = Math.ceil(p.promptTokens / bs) - hits
    const slots = this.slots
    slots.length = 0
    this.cache.acquire(hits, slots)
    // A prompt larger than the whole cache keeps what fits (its head), as a prefix would.
    const room = Math.min(need, this.cache.freeBlocks)
    this.cache.allocate(room, slots)
    const keys = p.blockKeys
    const full = Math.min(keys.length, slots.length)
    for (let b = hits; b < full; b++) this.cache.register(slots[b]!, keys[b]!)
    this.cache.release(slots)
  }

  get hitRate(): number {
    return this.promptTokens === 0 ? NaN : this.cachedTokens / this.promptTokens
  }
}
