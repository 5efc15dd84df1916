// The prefix indexer of llm-d's prefix-cache scorer, after
// gateway-api-inference-extension pkg/epp/scheduling/framework/plugins/multi/prefix/indexer.go:
// per server an LRU of the block hashes it was sent (hashicorp/golang-lru semantics: adding
// a present hash refreshes it, adding a new one to a full LRU evicts the oldest), and
// hash → servers for lookups, updated on eviction.
//
// indexer.go uses Go maps; with 257 hashes per request, JS Maps made this the replay's
// hottest code, so the same structure lives in typed arrays: one open-addressing table
// (the simulator's BlockIndex) from hash to a row of server bits, and per server a table
// from hash to LRU slot with the LRU order as an intrusive list.
import { BlockIndex } from '../../sim/block-index.js'

class Lru {
  readonly index: BlockIndex
  readonly keyOf: Float64Array
  readonly prev: Int32Array
  readonly next: Int32Array
  size = 0
  head = -1 // least recently used
  tail = -1

  constructor(readonly capacity: number) {
    this.index = new BlockIndex(capacity)
    this.keyOf = new Float64Array(capacity)
    this.prev = new Int32Array(capacity)
    this.next = new Int32Array(capacity)
  }

  unlink(s: number): void {
    const p = this.prev[s]!
    const n = this.next[s]!
    if (p >= 0) this.next[p] = n
    else this.head = n
    if (n >= 0) this.prev[n] = p
    else this.tail = p
  }

  pushTail(s: number): void {
    this.prev[s] = this.tail
    this.next[s] = -1
    if (this.tail >= 0) this.next[this.tail] = s
    else this.head = s
    this.tail = s
  }
}

export class PrefixIndexer {
  private readonly lrus: Lru[] = []
  /** hash → row in `bits` */
  private readonly rows: BlockIndex
  private bits: Int32Array
  private readonly words: number
  private readonly freeRows: number[] = []
  private nextRow = 0
  private readonly counts: Int32Array

  constructor(
    private readonly capacity: number,
    private readonly servers: number,
  ) {
    this.words = Math.ceil(servers / 31)
    // A hash is in the table only while some server's LRU holds it.
    this.rows = new BlockIndex(capacity * servers)
    this.bits = new Int32Array(1024 * this.words)
    this.counts = new Int32Array(servers)
  }

  add(hashes: ArrayLike<number>, server: number): void {
    let lru = this.lrus[server]
    if (lru === undefined) {
      lru = new Lru(this.capacity)
      this.lrus[server] = lru
    }
    const word = Math.floor(server / 31)
    const bit = 1 << server % 31
    for (let i = 0; i < hashes.length; i++) {
      const h = hashes[i]!
      const slot = lru.index.get(h)
      if (slot >= 0) {
        lru.unlink(slot)
        lru.pushTail(slot)
        continue
      }
      let s: number
      if (lru.size < lru.capacity) s = lru.size++
      else {
        s = lru.head
        lru.unlink(s)
        const old = lru.keyOf[s]!
        lru.index.delete(old)
        this.clear(old, word, bit)
      }
      lru.keyOf[s] = h
      lru.index.add(h, s)
      lru.pushTail(s)
      this.set(h, word, bit)
    }
  }

  /**
   * matchLongestPrefix: walking the hashes in order until one no server has, how many each
   * server has (indexer.go counts a server for every such hash it holds).
   */
  match(hashes: ArrayLike<number>): Int32Array {
    const counts = this.counts
    counts.fill(0)
    const W = this.words
    for (let i = 0; i < hashes.length; i++) {
      const row = this.rows.get(hashes[i]!)
      if (row < 0) break
      for (let w = 0; w < W; w++) {
        let m = this.bits[row * W + w]!
        while (m !== 0) {
          const b = 31 - Math.clz32(m)
          counts[w * 31 + b]!++
          m &= ~(1 << b)
        }
      }
    }
    return counts
  }

  /** Hashes remembered for a server. */
  size(server: number): number {
    return this.lrus[server]?.size ?? 0
  }

  private set(h: number, word: number, bit: number): void {
    const W = this.words
    let row = this.rows.get(h)
    if (row < 0) {
      row = this.freeRows.pop() ?? this.nextRow++
      if ((row + 1) * W > this.bits.length) {
        const grown = new Int32Array(this.bits.length * 2)
        grown.set(this.bits)
        this.bits = grown
      }
      this.bits.fill(0, row * W, row * W + W)
      this.rows.add(h, row)
    }
    this.bits[row * W + word]! |= bit
  }

  private clear(h: number, word: number, bit: number): void {
    const W = this.words
    const row = this.rows.get(h)
    if (row < 0) return
    this.bits[row * W + word]! &= ~bit
    for (let w = 0; w < W; w++) if (this.bits[row * W + w] !== 0) return
    this.rows.delete(h)
    this.freeRows.push(row)
  }
}
