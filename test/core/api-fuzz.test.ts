// Arbitrary values through the public API and the raw binding: every call returns or
// throws an Error; nothing aborts the process (an abort would fail this whole file).
import fc from 'fast-check'
import { describe, expect, it } from 'vitest'
import { xxh3 } from '../../src/core/hash.js'
import { native, type NativeHandle } from '../../src/core/native.js'
import { Router } from '../../src/core/router.js'

const anyValue = fc.oneof(
  fc.anything(),
  fc.uint8Array({ maxLength: 5000 }),
  fc.string({ maxLength: 3000 }),
  fc.string({ unit: 'binary', maxLength: 200 }),
  fc.bigInt(),
  fc.double(),
  fc.integer(),
  fc.constantFrom(undefined, null, NaN, -1, 2 ** 32, 2 ** 53, Infinity),
)

function settles(fn: () => unknown): void {
  try {
    fn()
  } catch (err) {
    expect(err).toBeInstanceOf(Error)
  }
}

describe('public API under arbitrary input', () => {
  it('xxh3 returns a 64-bit bigint or throws TypeError/RangeError', () => {
    fc.assert(
      fc.property(anyValue, anyValue, (data, seed) => {
        try {
          const h = xxh3(data as Uint8Array, seed as bigint)
          expect(typeof h).toBe('bigint')
          expect(h >= 0n && h < 1n << 64n).toBe(true)
        } catch (err) {
          expect(err instanceof TypeError || err instanceof RangeError).toBe(true)
        }
      }),
      { numRuns: 3000 },
    )
  })

  it('Router construction, pick, configure and setInstances never leave a counter behind', () => {
    const r = new Router({ instances: [{ id: 'a' }, { id: 'b' }, { id: 'c' }], concurrencyThreshold: 2 })
    fc.assert(
      fc.property(anyValue, anyValue, anyValue, (a, b, c) => {
        settles(() => new Router({ instances: a as never, strategy: b as never, prefixLength: c as never }).close())
        settles(() => r.pick(a as string, { tenant: b as string }).release())
        settles(() => r.pick(a as string, b as never).release())
        settles(() => r.configure({ strategy: a as never, concurrencyThreshold: c as never }))
        settles(() => r.setInstances(a as never))
        settles(() => r.inFlight(a as string))
        for (const inst of r.instances()) expect(inst.inFlight).toBe(0)
      }),
      { numRuns: 2000 },
    )
    r.close()
  })
})

describe('raw binding under arbitrary input (the native backstop)', () => {
  const fns = [
    'xxh3',
    'xxh3_path',
    'xxh3_chain',
    'router_configure',
    'router_set_instances',
    'router_io',
    'router_pick_io',
    'router_group_id',
    'router_release',
    'router_first_token',
    'router_slot_id',
    'router_in_flight',
    'router_instances',
    'router_stats',
    'router_exact_store',
    'router_exact_remove',
    'router_exact_clear',
    'router_exact_set_view',
    'router_exact_instance',
    'router_exact_match',
    'router_open',
  ] as const

  it('never aborts, with a real handle or anything else in the handle position', () => {
    const h = native.router_create(undefined, 64, 64)
    native.router_set_instances(h, ['x', 'y'], [1, 1])
    native.router_configure(h, 'longest_prefix', 1024, 4, 64, 1000, 3, 2, 2, 4096) // the index and anchor paths too
    fc.assert(
      fc.property(fc.constantFrom(...fns), fc.boolean(), anyValue, anyValue, anyValue, anyValue, (fn, real, a, b, c, d) => {
        const f = native[fn] as (...args: unknown[]) => unknown
        settles(() => f(real ? h : a, a, b, c, d, a))
        settles(() => f(real ? h : a, a, b, c, d, new Float64Array(4)))
        settles(() => f(real ? h : b, b, c))
      }),
      { numRuns: 5000 },
    )
    // Bogus releases must not have driven a counter below zero or freed a live slot.
    const stats = native.router_stats(h)
    expect(stats.slotsInUse).toBeGreaterThanOrEqual(1)
    native.router_close(h)
    expect(() => native.router_pick_io(h, 'p', undefined, undefined)).toThrow(/router is closed/)
  })

  it('router_pick_io never aborts, whatever its io block and arguments hold', () => {
    const h = native.router_create(undefined, 64, 64)
    native.router_set_instances(h, ['x', 'y'], [1, 1], [['m'], ['m', 'n']])
    const io = native.router_io(h)
    const word = fc.oneof(fc.double(), fc.integer({ min: -3, max: 70000 }), fc.constantFrom(0, 1, -1, -2, 8, 9, 2 ** 32))
    const key = fc.oneof(anyValue, fc.uint8Array({ minLength: 1, maxLength: 300 }).map((b) => new Uint8Array(b.buffer, 0, Math.max(0, b.length - 80))))
    let picked = 0
    fc.assert(
      fc.property(fc.boolean(), fc.array(word, { minLength: io.length, maxLength: io.length }), key, anyValue, anyValue, (longest, words, k, t, g) => {
        native.router_configure(h, longest ? 'longest_prefix' : 'prefix_aware', 1024, 4, 64, 1000, 3, 2, 2, 4096)
        io.set(words)
        settles(() => {
          if (native.router_pick_io(h, k as Uint8Array, t as string | undefined, g as string | undefined) === 0) {
            picked++
            native.router_release(h, io[0]!, io[3])
          }
        })
      }),
      { numRuns: 5000 },
    )
    // The run took leases (so the pick paths ran), and gave every one back.
    expect(picked).toBeGreaterThan(0)
    expect(native.router_in_flight(h, 'x') + native.router_in_flight(h, 'y')).toBe(0)
    native.router_close(h)
  })

  it('rejects a closed or foreign handle with a clear error', () => {
    expect(() => native.router_pick_io({} as NativeHandle, 'p', undefined, undefined)).toThrow(/not a router handle/)
    expect(() => native.router_open('no-such-router')).toThrow(expect.objectContaining({ code: 'ROUTER_NOT_FOUND' }))
  })
})
