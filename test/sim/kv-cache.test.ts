import fc from 'fast-check'
import { describe, expect, it } from 'vitest'
import { BlockIndex } from '../../src/sim/block-index.js'
import { KvCache } from '../../src/sim/kv-cache.js'

const keys = (...k: number[]): Float64Array => Float64Array.from(k)
const found = { hits: 0, freeHits: 0 }

/** Runs one request through the cache: look up, pin hits, allocate the rest, register, release. */
function serve(cache: KvCache, blockKeys: number[], partial = true): { hits: number; slots: number[] } {
  const k = keys(...blockKeys)
  cache.lookup(k, k.length, found)
  const hits = found.hits
  const slots: number[] = []
  cache.acquire(hits, slots)
  const need = blockKeys.length + (partial ? 1 : 0) - hits
  if (!cache.allocate(need, slots)) throw new Error('no room')
  for (let i = hits; i < blockKeys.length; i++) cache.register(slots[i]!, blockKeys[i]!)
  cache.release(slots)
  return { hits, slots }
}

const range = (from: number, n: number): number[] => Array.from({ length: n }, (_, i) => from + i)

describe('KvCache', () => {
  it('keeps blocks until capacity, then evicts the least recently used, tail blocks first', () => {
    const cache = new KvCache(64)
    const A = range(1000, 20)
    const B = range(2000, 20)
    const C = range(3000, 20)
    const D = range(4000, 20)
    serve(cache, A)
    serve(cache, B)
    serve(cache, C)
    expect(cache.evictions).toBe(0)
    expect(cache.cachedBlocks).toBe(60)
    expect(serve(cache, A).hits).toBe(20) // A is now the most recently used
    expect(cache.evictions).toBe(0)
    serve(cache, D) // 21 blocks; 4 never-used or partial blocks are free, so 17 cached blocks go
    expect(cache.evictions).toBe(17)
    // B was least recently used: it lost its last 17 blocks and kept its first 3.
    for (let i = 0; i < 3; i++) expect(cache.has(B[i]!)).toBe(true)
    for (let i = 3; i < 20; i++) expect(cache.has(B[i]!)).toBe(false)
    for (const k of [...A, ...C, ...D]) expect(cache.has(k)).toBe(true)
    expect(serve(cache, C).hits).toBe(20)
    expect(serve(cache, A).hits).toBe(20)
    expect(serve(cache, B).hits).toBe(3)
  })

  it('never evicts pinned blocks and refuses an allocation that does not fit', () => {
    const cache = new KvCache(16)
    const slots: number[] = []
    expect(cache.allocate(10, slots)).toBe(true)
    slots.forEach((s, i) => cache.register(s, 100 + i))
    expect(cache.usage).toBeCloseTo(10 / 16)
    const more: number[] = []
    expect(cache.allocate(7, more)).toBe(false)
    expect(more).toEqual([])
    expect(cache.allocate(6, more)).toBe(true)
    expect(cache.evictions).toBe(0)
    for (let i = 0; i < 10; i++) expect(cache.has(100 + i)).toBe(true)
    cache.release(more)
    cache.release(slots)
    expect(cache.usage).toBe(0)
    expect(cache.cachedBlocks).toBe(10)
  })

  it('pinning a cached free block takes it out of the free pool (lookup reports it)', () => {
    const cache = new KvCache(8)
    serve(cache, [1, 2, 3], false)
    cache.lookup(keys(1, 2, 3, 4), 4, found)
    expect(found).toEqual({ hits: 3, freeHits: 3 })
    const slots: number[] = []
    cache.acquire(found.hits, slots)
    expect(cache.freeBlocks).toBe(5)
    cache.lookup(keys(1, 2), 2, found)
    expect(found).toEqual({ hits: 2, freeHits: 0 })
    cache.release(slots)
  })

  it('keeps the first block for a key when two sequences computed the same block', () => {
    const cache = new KvCache(8)
    const a: number[] = []
    const b: number[] = []
    cache.allocate(1, a)
    cache.allocate(1, b)
    cache.register(a[0]!, 7)
    cache.register(b[0]!, 7)
    cache.release(b) // the duplicate has no key: it goes back as a plain free block
    cache.release(a)
    expect(cache.cachedBlocks).toBe(1)
    cache.lookup(keys(7), 1, found)
    expect(found.hits).toBe(1)
  })
})

describe('BlockIndex', () => {
  it('agrees with a Map under random adds and deletes', () => {
    fc.assert(
      fc.property(
        fc.array(fc.tuple(fc.boolean(), fc.integer({ min: 0, max: 200 }).map((k) => k * 1024 + (k % 3) * 2 ** 40)), {
          maxLength: 400,
        }),
        (ops) => {
          const idx = new BlockIndex(256)
          const ref = new Map<number, number>()
          for (const [i, [add, key]] of ops.entries()) {
            if (add) {
              expect(idx.add(key, i)).toBe(!ref.has(key))
              if (!ref.has(key)) ref.set(key, i)
            } else {
              idx.delete(key)
              ref.delete(key)
            }
            expect(idx.size).toBe(ref.size)
          }
          for (let k = 0; k <= 200; k++) {
            const key = k * 1024 + (k % 3) * 2 ** 40
            expect(idx.get(key)).toBe(ref.get(key) ?? -1)
          }
        },
      ),
    )
  })
})
