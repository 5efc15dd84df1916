// Hash table from block key to cache slot, open addressing over typed arrays. It replaces
// a Map<bigint, number>: hashing BigInt keys made Map operations ~45% of the virtual
// engine's time. Keys are the low 52 bits of the XXH3 block hash, exact in a double (a
// false hit between two cached blocks has probability ~n / 2^52 per lookup); stored + 1
// so that 0 marks an empty bucket. Deletion shifts back (no tombstones).

export class BlockIndex {
  private readonly keys: Float64Array
  private readonly vals: Int32Array
  private readonly mask: number
  private count = 0

  constructor(maxEntries: number) {
    let size = 16
    while (size < maxEntries * 2) size *= 2 // load factor at most 1/2
    this.keys = new Float64Array(size)
    this.vals = new Int32Array(size)
    this.mask = size - 1
  }

  get size(): number {
    return this.count
  }

  clear(): void {
    this.keys.fill(0)
    this.count = 0
  }

  /** The slot stored under `key`, or -1. */
  get(key: number): number {
    const k = key + 1
    const keys = this.keys
    const mask = this.mask
    for (let i = key & mask; ; i = (i + 1) & mask) {
      const c = keys[i]!
      if (c === k) return this.vals[i]!
      if (c === 0) return -1
    }
  }

  /** Stores `slot` under `key` unless the key is present; false if it was. */
  add(key: number, slot: number): boolean {
    const k = key + 1
    const keys = this.keys
    const mask = this.mask
    let i = key & mask
    for (;;) {
      const c = keys[i]!
      if (c === k) return false
      if (c === 0) break
      i = (i + 1) & mask
    }
    keys[i] = k
    this.vals[i] = slot
    this.count++
    return true
  }

  delete(key: number): void {
    const k = key + 1
    const keys = this.keys
    const vals = this.vals
    const mask = this.mask
    let i = key & mask
    for (;;) {
      const c = keys[i]!
      if (c === 0) return
      if (c === k) break
      i = (i + 1) & mask
    }
    this.count--
    // Backward-shift deletion: move later entries of the probe run into the gap when
    // their home bucket is at or before it, so lookups never stop early.
    let gap = i
    for (let j = (i + 1) & mask; ; j = (j + 1) & mask) {
      const c = keys[j]!
      if (c === 0) break
      const home = (c - 1) & mask
      if (((j - home) & mask) >= ((j - gap) & mask)) {
        keys[gap] = c
        vals[gap] = vals[j]!
        gap = j
      }
    }
    keys[gap] = 0
  }
}
