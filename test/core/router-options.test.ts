import { describe, expect, it } from 'vitest'
import { Router } from '../../src/core/router.js'
import { parseStrategy } from '../../src/core/options.js'

const one = [{ id: 'a' }]

function errorOf(fn: () => unknown): Error {
  try {
    fn()
  } catch (err) {
    return err as Error
  }
  throw new Error('expected a throw')
}

describe('Router options', () => {
  it('accepts strategy names in any case with - or _', () => {
    for (const s of ['prefix_aware', 'PREFIX_AWARE', 'Prefix-Aware', ' prefix-aware ']) expect(parseStrategy(s)).toBe('prefix_aware')
    expect(parseStrategy('LEAST-OUTSTANDING-REQUESTS')).toBe('least_outstanding_requests')
    expect(parseStrategy('Random')).toBe('random')
  })

  it.each([
    [{ strategy: 'round_robin' }, RangeError, /strategy must be one of random, least_outstanding_requests, prefix_aware, longest_prefix; got "round_robin"/],
    [{ strategy: 3 }, TypeError, /strategy must be one of/],
    [{ prefixLength: 1023 }, RangeError, /prefixLength must be an integer from 1024 to 65536; got 1023/],
    [{ prefixLength: 65537 }, RangeError, /prefixLength must be an integer from 1024 to 65536/],
    [{ prefixLength: 2048.5 }, RangeError, /prefixLength/],
    [{ prefixLength: '4096' }, TypeError, /prefixLength must be an integer from 1024 to 65536; got "4096"/],
    [{ concurrencyThreshold: 0 }, RangeError, /concurrencyThreshold must be an integer from 1 to 1024; got 0/],
    [{ concurrencyThreshold: 1025 }, RangeError, /concurrencyThreshold must be an integer from 1 to 1024/],
    [{ concurrencyThreshold: Number.NaN }, RangeError, /concurrencyThreshold/],
    [{ vnodes: 8 }, RangeError, /vnodes must be an integer from 16 to 65536/],
    [{ name: '' }, RangeError, /name must be a string of 1 to 256 characters/],
  ])('rejects %j', (bad, type, message) => {
    const err = errorOf(() => new Router({ instances: one, ...(bad as object) }))
    expect(err).toBeInstanceOf(type)
    expect(err.message).toMatch(message)
  })

  it.each([
    [[], RangeError, /instances must list at least one instance; got an empty array/],
    [undefined, TypeError, /instances must be an array of \{ id, weight\? \}/],
    [[{ id: 'a' }, { id: 'b' }, { id: 'a' }], RangeError, /instances\[2\]\.id must be unique; "a" appears more than once/],
    [[{ id: '' }], RangeError, /instances\[0\]\.id must be a string of 1 to 1024 characters/],
    [[{ id: 7 }], TypeError, /instances\[0\]\.id must be a non-empty string/],
    [[null], TypeError, /instances\[0\] must be an object/],
    [[{ id: 'a', weight: 0 }], RangeError, /instances\[0\]\.weight must be a number from 0.01 to 100; got 0/],
    [[{ id: 'a', weight: Infinity }], RangeError, /weight/],
    [[{ id: 'a', weight: '2' }], TypeError, /instances\[0\]\.weight must be a number/],
  ])('rejects instances %j', (instances, type, message) => {
    const err = errorOf(() => new Router({ instances: instances as never }))
    expect(err).toBeInstanceOf(type)
    expect(err.message).toMatch(message)
    const r = new Router({ instances: one })
    expect(() => r.setInstances(instances as never)).toThrow(message)
    r.close()
  })

  it('caps the ring size and says which knob to turn', () => {
    const many = Array.from({ length: 3000 }, (_, i) => ({ id: `i${i}` }))
    expect(() => new Router({ instances: many })).toThrow(/ring points, above the limit of 16777216; lower vnodes/)
    const r = new Router({ instances: many, vnodes: 256 })
    expect(r.instances()).toHaveLength(3000)
    r.close()
  })

  it.each([
    ['', /tenant must be 1 to 64 printable ASCII characters/],
    ['x'.repeat(65), /tenant must be 1 to 64 printable ASCII characters/],
    ['tab\there', /tenant/],
    ['café', /tenant/],
    [42, /tenant must be a string/],
  ])('rejects tenant %j', (tenant, message) => {
    const r = new Router({ instances: one })
    expect(() => r.pick('p', { tenant: tenant as string })).toThrow(message)
    expect(r.inFlight('a')).toBe(0)
    r.close()
  })

  it('accepts every printable ASCII tenant of 1 to 64 characters', () => {
    const r = new Router({ instances: one })
    for (const t of ['a', ' ~!"#$%&\'()*+,-./', 'x'.repeat(64)]) r.pick('p', { tenant: t }).release()
    r.close()
  })

  it('rejects a prefix that is neither bytes nor text', () => {
    const r = new Router({ instances: one })
    expect(() => r.pick(12 as unknown as string)).toThrow(/prefix must be a Uint8Array or a string; got 12/)
    expect(() => r.pick({} as unknown as string)).toThrow(TypeError)
    r.close()
  })

  it('configure validates like the constructor and keeps the old values on error', () => {
    const r = new Router({ instances: one, prefixLength: 2048 })
    expect(() => r.configure({ concurrencyThreshold: 0 })).toThrow(/concurrencyThreshold/)
    expect(r.params).toEqual({
      strategy: 'prefix_aware',
      prefixLength: 2048,
      concurrencyThreshold: 10,
      thresholdSet: false,
      blockSize: 64,
      indexBlocks: 65536,
      placement: 'balanced',
      matchLength: 65536,
      loadFactor: 3,
      prefillWeight: 6,
      exactBlockSize: 16,
      exactCapacity: 2097152,
      cpuBlockWeight: 0.5,
      pendingMs: 10000,
      engineLoadAll: false,
    })
    r.configure({ concurrencyThreshold: 4 })
    expect(r.params.concurrencyThreshold).toBe(4)
    // A threshold given once stays when the strategy changes; a default one follows it.
    r.configure({ strategy: 'longest_prefix' })
    expect(r.params.concurrencyThreshold).toBe(4)
    const d = new Router({ instances: one })
    d.configure({ strategy: 'longest_prefix' })
    expect(d.params.concurrencyThreshold).toBe(1024)
    d.close()
    r.close()
  })

  it('errors carry Node-style codes', () => {
    expect(errorOf(() => new Router({ instances: one, prefixLength: 1 }))).toMatchObject({ code: 'ERR_OUT_OF_RANGE' })
    expect(errorOf(() => new Router({ instances: one, strategy: 1 as never }))).toMatchObject({ code: 'ERR_INVALID_ARG_TYPE' })
  })
})
