// The ideal hit rate: an upper bound on the token hit rate any router can reach with the
// fleet's capacity.
//
// It is Belady's offline-optimal cache (MIN, with bypass) of the fleet's total capacity,
// run over the sequence of full-block accesses in arrival order (each request's full blocks
// 0..m−1, m = ⌊prompt tokens / block size⌋), with hits counted over every full block, the
// last one included (the engine recomputes it for the last token's logits; counting it
// keeps this an upper bound and independent of the prompt's alignment).
//
// Why no router beats it: a fleet hit on a block means an instance has kept that block in a
// slot since an earlier request containing it was served, so through the block's previous
// access; and at any moment the instances hold at most the fleet's capacity in blocks. The
// union of their caches is therefore one cache of that capacity that may decline to keep a
// block (bypass), and among all of those MIN has the most hits. A fleet also counts only
// leading blocks and only at a request's first admission, which can only lose hits.
//
// The one gap: the bound is computed in arrival order, while a fleet admits a request a
// little after it arrives (the API server's overhead depends on the prompt's length) and
// in each instance's own order (a preempted request is readmitted later), which can swap
// requests that arrive close together. No replay or test has shown that to matter, but
// the bound is exact only for the arrival order.
//
// MIN needs the future, so observe() only records the accesses; the bound is computed once,
// when first asked for. Memory is 4 bytes per access (an hour of long-context on 7
// instances is ~25 M accesses, ~100 MB), plus, while recording, 18–36 bytes per distinct
// block for the table that numbers them.
import type { PreparedPrompt } from '../sim/block-hash.js'

/**
 * Accesses are stored in chunks so that growing never copies ~100 MB at once; the first
 * chunk starts small and doubles up to full size, so that a short replay stays small.
 */
const CHUNK_BITS = 20
const CHUNK = 1 << CHUNK_BITS
const FIRST_CHUNK = 1 << 12

export class IdealCache {
  private readonly capacity: number
  // Dense block ids per access while recording; after the backward pass, the position of
  // the same block's next access (-1 for none).
  private chunks: Int32Array[] = [new Int32Array(FIRST_CHUNK)]
  private accesses = 0
  /** Entries in the last chunk. */
  private fill = 0
  private blocks: BlockIds | null = new BlockIds()
  // Per request: its full blocks, its prompt tokens (0 if no engine would serve it), and
  // after the computation the hits up to and including it.
  private reqBlocks = new Int32Array(1024)
  private reqTokens = new Float64Array(1024)
  private cumHits: Float64Array | null = null
  private cumTokens: Float64Array | null = null
  private requests = 0

  constructor(
    capacityBlocks: number,
    private readonly blockSize: number,
  ) {
    this.capacity = Math.max(0, Math.floor(capacityBlocks))
  }

  /**
   * Records one request, in arrival order. `served` false: a request the engines refuse
   * (it never reaches a cache and the lanes do not count its tokens); it keeps its index.
   */
  observe(p: PreparedPrompt, served = true): void {
    const blocks = this.blocks
    if (blocks === null) throw new Error('IdealCache: observe() after the hit rate was computed')
    if (this.requests === this.reqBlocks.length) {
      this.reqBlocks = grow(this.reqBlocks, new Int32Array(2 * this.requests))
      this.reqTokens = grow(this.reqTokens, new Float64Array(2 * this.requests))
    }
    const m = served ? Math.min(p.blockKeys.length, Math.floor(p.promptTokens / this.blockSize)) : 0
    this.reqBlocks[this.requests] = m
    this.reqTokens[this.requests] = served ? p.promptTokens : 0
    this.requests++
    const keys = p.blockKeys
    let chunk = this.chunks[this.chunks.length - 1]!
    let fill = this.fill
    for (let b = 0; b < m; b++) {
      if (fill === chunk.length) {
        if (fill < CHUNK) chunk = this.chunks[0] = grow(chunk, new Int32Array(2 * fill))
        else {
          chunk = new Int32Array(CHUNK)
          this.chunks.push(chunk)
          fill = 0
        }
      }
      chunk[fill++] = blocks.id(keys[b]!)
    }
    this.fill = fill
    this.accesses += m
  }

  /** Requests observed. */
  get observed(): number {
    return this.requests
  }

  /** Prompt tokens of the requests observed (served ones). */
  get promptTokens(): number {
    return this.requests === 0 ? 0 : this.computed().tokens[this.requests - 1]!
  }

  /** Tokens of the optimal cache's hits. */
  get cachedTokens(): number {
    return this.requests === 0 ? 0 : this.computed().hits[this.requests - 1]! * this.blockSize
  }

  /** The bound over every request observed; NaN with no prompt tokens. */
  get hitRate(): number {
    return this.hitRateOf(this.requests)
  }

  /**
   * The bound over the first `n` requests observed. Valid as a bound for a fleet that served
   * only those: MIN's decisions on blocks used again within a prefix never depend on what
   * comes after it (a block whose next use lies beyond is always the first to go), so its
   * hits up to any point are the optimum for that prefix.
   */
  hitRateOf(n: number): number {
    const k = Math.min(n, this.requests)
    if (k <= 0) return NaN
    const c = this.computed()
    const tokens = c.tokens[k - 1]!
    return tokens === 0 ? NaN : (c.hits[k - 1]! * this.blockSize) / tokens
  }

  private computed(): { hits: Float64Array; tokens: Float64Array } {
    if (this.cumHits === null || this.cumTokens === null) {
      const distinct = this.blocks?.size ?? 0
      this.blocks = null // no longer needed; freed before the passes allocate
      this.cumHits = this.run(distinct)
      const tokens = new Float64Array(this.requests)
      let sum = 0
      for (let r = 0; r < this.requests; r++) tokens[r] = sum += this.reqTokens[r]!
      this.cumTokens = tokens
      this.chunks = []
    }
    return { hits: this.cumHits, tokens: this.cumTokens }
  }

  /** MIN over the recorded accesses; cumulative hits per request. */
  private run(distinct: number): Float64Array {
    const n = this.accesses
    const chunks = this.chunks
    // Backward pass: each access's id becomes the position of the same block's next access.
    const last = new Int32Array(distinct).fill(-1)
    for (let c = chunks.length - 1; c >= 0; c--) {
      const a = chunks[c]!
      const base = c * CHUNK
      for (let off = Math.min(CHUNK, n - base) - 1; off >= 0; off--) {
        const id = a[off]!
        a[off] = last[id]!
        last[id] = base + off
      }
    }
    // Forward pass. A cached block is represented by the position of its next access, which
    // no other block shares, so "the block accessed at i is cached" is "i is in the set",
    // and the block MIN evicts (needed farthest in the future) is the set's maximum.
    const cap = this.capacity
    const set = new PositionSet(n)
    const cum = new Float64Array(this.requests)
    let size = 0
    let hits = 0
    let pos = 0
    for (let r = 0; r < this.requests; r++) {
      for (let end = pos + this.reqBlocks[r]!; pos < end; pos++) {
        const next = chunks[pos >>> CHUNK_BITS]![pos & (CHUNK - 1)]!
        if (set.has(pos)) {
          hits++
          set.delete(pos)
          // Kept for its next use; a block never used again leaves (nothing to gain).
          if (next >= 0) set.insert(next)
          else size--
        } else if (next >= 0 && cap > 0) {
          if (size < cap) {
            set.insert(next)
            size++
          } else {
            const far = set.max()
            // Otherwise bypass: the newcomer is the one needed farthest in the future.
            if (next < far) {
              set.delete(far)
              set.insert(next)
            }
          }
        }
      }
      cum[r] = hits
    }
    return cum
  }
}

function grow<T extends Int32Array | Float64Array>(from: T, to: T): T {
  to.set(from)
  return to
}

/** A 52-bit key is kept as two 26-bit halves, so a bucket is three 32-bit integers. */
const HALF = 2 ** 26

/**
 * Dense ids for block keys: open addressing over one typed array, grown past 2/3 load (see
 * src/sim/block-index.ts for why not a Map). A bucket is (high half + 1, low half, id), 0
 * marking an empty one: 12 bytes side by side, so a lookup costs one cache miss, and a chat
 * trace's millions of distinct blocks take ~100 MB rather than the ~270 MB that doubles and
 * half load would.
 */
class BlockIds {
  private table = new Int32Array(3 << 12)
  private mask = (1 << 12) - 1
  size = 0

  id(key: number): number {
    const hi = Math.floor(key / HALF)
    const lo = key - hi * HALF
    const h = hi + 1
    const t = this.table
    const mask = this.mask
    let i = key & mask
    for (;;) {
      const j = 3 * i
      const c = t[j]!
      if (c === 0) break
      if (c === h && t[j + 1] === lo) return t[j + 2]!
      i = (i + 1) & mask
    }
    const id = this.size++
    const j = 3 * i
    t[j] = h
    t[j + 1] = lo
    t[j + 2] = id
    if (3 * this.size > 2 * (mask + 1)) this.rehash()
    return id
  }

  private rehash(): void {
    const old = this.table
    const buckets = 2 * (this.mask + 1)
    const t = new Int32Array(3 * buckets)
    const mask = buckets - 1
    for (let j = 0; j < old.length; j += 3) {
      const c = old[j]!
      if (c === 0) continue
      let i = ((c - 1) * HALF + old[j + 1]!) & mask
      while (t[3 * i] !== 0) i = (i + 1) & mask
      t[3 * i] = c
      t[3 * i + 1] = old[j + 1]!
      t[3 * i + 2] = old[j + 2]!
    }
    this.table = t
    this.mask = mask
  }
}

/**
 * A set of positions in [0, n): a bitset with a summary level per 32 words (a bit per
 * non-empty word below) up to a single word, so insert, delete and max touch one word per
 * level (⌈log32 n⌉ levels: 5 for 25 M positions). 32-bit words because that is what
 * JavaScript's bitwise operators and Math.clz32 work on.
 */
export class PositionSet {
  private readonly levels: Int32Array[] = []

  constructor(n: number) {
    let words = Math.max(1, Math.ceil(n / 32))
    for (;;) {
      this.levels.push(new Int32Array(words))
      if (words === 1) break
      words = Math.ceil(words / 32)
    }
  }

  has(p: number): boolean {
    return (this.levels[0]![p >>> 5]! & (1 << (p & 31))) !== 0
  }

  insert(p: number): void {
    const levels = this.levels
    for (let l = 0; l < levels.length; l++) {
      const w = levels[l]!
      const i = p >>> 5
      const before = w[i]!
      w[i] = before | (1 << (p & 31))
      if (before !== 0) return
      p = i
    }
  }

  delete(p: number): void {
    const levels = this.levels
    for (let l = 0; l < levels.length; l++) {
      const w = levels[l]!
      const i = p >>> 5
      const after = w[i]! & ~(1 << (p & 31))
      w[i] = after
      if (after !== 0) return
      p = i
    }
  }

  /** The largest position in the set, or -1 if it is empty. */
  max(): number {
    const levels = this.levels
    let i = 0
    for (let l = levels.length - 1; l >= 0; l--) {
      const w = levels[l]![i]!
      if (w === 0) return -1
      i = i * 32 + (31 - Math.clz32(w))
    }
    return i
  }
}
