// The KV block pool with prefix caching, after vLLM v1's KVCacheManager:
// - `capacity` physical blocks; a block is pinned (ref > 0) while a running sequence uses it;
// - a full, computed block is registered under its chained hash and stays findable after
//   its sequences finish, until the block is reused for something else (eviction);
// - free blocks wait in one queue; allocation takes the head. A sequence's blocks are
//   freed last-to-first onto the tail, so the least recently used block is evicted first
//   and, within a prompt, its tail goes before its head (the head is the more shared part);
// - a free block without a hash (never used, a partial block, a duplicate) goes to the
//   head: reusing it loses nothing, so eviction only starts when the pool is full.
// Slots are integers, block keys are numbers (block-hash.ts) and the queue and the index
// live in typed arrays: no allocation per block.
import { BlockIndex } from './block-index.js'

export class KvCache {
  readonly capacity: number
  private readonly ref: Int32Array
  private readonly prev: Int32Array
  private readonly next: Int32Array
  /** Block key + 1 held by each slot; 0 for none. */
  private readonly keyOf: Float64Array
  private readonly index: BlockIndex
  /** Slots found by the last lookup, for acquire. */
  private found = new Int32Array(64)
  private head = -1
  private tail = -1
  private free = 0
  /** Cached blocks reused for other content. */
  evictions = 0
  /** Told each key that leaves the cache (its block reused): the engine's BlockRemoved events. */
  onEvict: ((key: number) => void) | null = null

  constructor(capacity: number) {
    this.capacity = capacity
    this.ref = new Int32Array(capacity)
    this.prev = new Int32Array(capacity)
    this.next = new Int32Array(capacity)
    this.keyOf = new Float64Array(capacity)
    this.index = new BlockIndex(capacity)
    for (let s = capacity - 1; s >= 0; s--) this.pushHead(s)
  }

  get freeBlocks(): number {
    return this.free
  }

  get usedBlocks(): number {
    return this.capacity - this.free
  }

  /** Blocks holding a key (pinned or free). */
  get cachedBlocks(): number {
    return this.index.size
  }

  /** Fraction of blocks pinned by running sequences (vllm:kv_cache_usage_perc). */
  get usage(): number {
    return (this.capacity - this.free) / this.capacity
  }

  has(key: number): boolean {
    return this.index.get(key) >= 0
  }

  /**
   * How many leading keys (at most `limit`) are cached, and how many of those sit in the
   * free queue: pinning them shrinks the pool an admission can allocate from.
   */
  lookup(keys: Float64Array, limit: number, out: { hits: number; freeHits: number }): void {
    const n = Math.min(limit, keys.length)
    if (this.found.length < n) this.found = new Int32Array(Math.max(n, 2 * this.found.length))
    const found = this.found
    let hits = 0
    let freeHits = 0
    for (; hits < n; hits++) {
      const slot = this.index.get(keys[hits]!)
      if (slot < 0) break
      found[hits] = slot
      if (this.ref[slot] === 0) freeHits++
    }
    out.hits = hits
    out.freeHits = freeHits
  }

  /** Pins the first `n` blocks the last lookup found (call before anything else changes the cache). */
  acquire(n: number, slots: number[]): void {
    const found = this.found
    for (let i = 0; i < n; i++) {
      const slot = found[i]!
      const r = this.ref[slot]!
      this.ref[slot] = r + 1
      if (r === 0) this.unlink(slot)
      slots.push(slot)
    }
  }

  /** Takes `n` free blocks (evicting cached ones as needed) onto `slots`; false if fewer are free. */
  allocate(n: number, slots: number[]): boolean {
    if (n > this.free) return false
    for (let i = 0; i < n; i++) {
      const slot = this.head
      this.unlink(slot)
      const k = this.keyOf[slot]!
      if (k !== 0) {
        this.index.delete(k - 1)
        this.keyOf[slot] = 0
        this.evictions++
        if (this.onEvict !== null) this.onEvict(k - 1)
      }
      this.ref[slot] = 1
      slots.push(slot)
    }
    return true
  }

  /**
   * Makes a computed full block findable; a key already cached elsewhere keeps that block.
   * True if the key is newly cached (what a BlockStored event reports).
   */
  register(slot: number, key: number): boolean {
    if (this.keyOf[slot] !== 0) return false
    if (!this.index.add(key, slot)) return false
    this.keyOf[slot] = key + 1
    return true
  }

  /** The keys cached now (pinned or free), in no order: what an exact view must hold. */
  cachedKeys(): number[] {
    const out: number[] = []
    for (let s = 0; s < this.capacity; s++) if (this.keyOf[s] !== 0) out.push(this.keyOf[s]! - 1)
    return out
  }

  /**
   * Forgets every key and returns every block to the free queue, as a fresh process
   * starts. Only when nothing is pinned: the caller aborts its sequences first.
   */
  clear(): void {
    for (let s = 0; s < this.capacity; s++) {
      if (this.ref[s] !== 0) throw new Error('KvCache.clear: blocks are still pinned')
    }
    this.keyOf.fill(0)
    this.index.clear()
    this.head = this.tail = -1
    this.free = 0
    for (let s = this.capacity - 1; s >= 0; s--) this.pushHead(s)
  }

  /** Unpins a sequence's blocks, last to first. */
  release(slots: readonly number[]): void {
    for (let i = slots.length - 1; i >= 0; i--) {
      const slot = slots[i]!
      const r = this.ref[slot]! - 1
      this.ref[slot] = r
      if (r === 0) {
        if (this.keyOf[slot] !== 0) this.pushTail(slot)
        else this.pushHead(slot)
      }
    }
  }

  private unlink(slot: number): void {
    const p = this.prev[slot]!
    const n = this.next[slot]!
    if (p >= 0) this.next[p] = n
    else this.head = n
    if (n >= 0) this.prev[n] = p
    else this.tail = p
    this.free--
  }

  private pushHead(slot: number): void {
    this.prev[slot] = -1
    this.next[slot] = this.head
    if (this.head >= 0) this.prev[this.head] = slot
    else this.tail = slot
    this.head = slot
    this.free++
  }

  private pushTail(slot: number): void {
    this.next[slot] = -1
    this.prev[slot] = this.tail
    if (this.tail >= 0) this.next[this.tail] = slot
    else this.head = slot
    this.tail = slot
    this.free++
  }
}
