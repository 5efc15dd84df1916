// A least-recently-used map bounded by entries and by bytes, with hit and miss counts: the
// tokenizers' caches (whole requests for remote, text segments for local). Map order is the
// recency order: a hit is deleted and set again, which is cheap at these sizes (one entry
// per request or per message, not per token).
export class BoundedLru<V> {
  private readonly map = new Map<string, { value: V; bytes: number }>()
  private total = 0
  hits = 0
  misses = 0

  constructor(
    readonly maxEntries: number,
    readonly maxBytes: number,
  ) {}

  get size(): number {
    return this.map.size
  }

  get bytes(): number {
    return this.total
  }

  get(key: string): V | undefined {
    const e = this.map.get(key)
    if (e === undefined) {
      this.misses++
      return undefined
    }
    this.hits++
    this.map.delete(key)
    this.map.set(key, e)
    return e.value
  }

  /** Stores `value`, costing `bytes`; one entry over a quarter of the budget is not kept, so it cannot flush the rest. */
  set(key: string, value: V, bytes: number): void {
    const old = this.map.get(key)
    if (old !== undefined) {
      this.map.delete(key)
      this.total -= old.bytes
    }
    if (bytes > this.maxBytes / 4 || this.maxEntries === 0) return
    this.map.set(key, { value, bytes })
    this.total += bytes
    for (const [k, e] of this.map) {
      if (this.map.size <= this.maxEntries && this.total <= this.maxBytes) break
      this.map.delete(k)
      this.total -= e.bytes
    }
  }

  clear(): void {
    this.map.clear()
    this.total = 0
  }
}
