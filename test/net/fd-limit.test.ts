// The front's connection cap, from the descriptor limit less what the rest of the router needs.
import { describe, expect, it } from 'vitest'
import { ADMIN_MAX_CONNECTIONS, FALLBACK_FD_LIMIT, frontMaxConnections, parseSoftFdLimit, PROBE_FDS_PER_INSTANCE, RESERVED_FDS, reservedFds, softFdLimit } from '../../src/net/fd-limit.js'

const LIMITS = `Limit                     Soft Limit           Hard Limit           Units
Max cpu time              unlimited            unlimited            seconds
Max open files            1024                 1048576              files
Max locked memory         8388608              8388608              bytes
`

/** `instances` instances with a pool of 128 connections each (upstream.connections' default). */
const needs = (instances: number, extra: { connectionsPerInstance?: number; maxConnections?: number } = {}) => ({ instances, connectionsPerInstance: 128, ...extra })

describe('descriptor limit', () => {
  it('reads the soft limit, not the hard one', () => {
    expect(parseSoftFdLimit(LIMITS)).toBe(1024)
    expect(softFdLimit(() => LIMITS)).toBe(1024)
  })

  it('takes unlimited as very large, and falls back where the file is missing or odd', () => {
    expect(parseSoftFdLimit(LIMITS.replace('1024 ', 'unlimited '))).toBe(Number.MAX_SAFE_INTEGER)
    expect(parseSoftFdLimit('Max open files  lots  lots  files')).toBeUndefined()
    expect(softFdLimit(() => 'nothing here')).toBe(FALLBACK_FD_LIMIT)
    expect(
      softFdLimit(() => {
        throw Object.assign(new Error('no /proc'), { code: 'ENOENT' })
      }),
    ).toBe(FALLBACK_FD_LIMIT)
  })

  it('this process has one', () => {
    expect(softFdLimit()).toBeGreaterThan(0)
  })
})

describe('front maxConnections', () => {
  it('leaves room for every instance pool, the probes, the admin port and files', () => {
    const c = needs(3, { connectionsPerInstance: 16 })
    const reserved = 3 * (16 + PROBE_FDS_PER_INSTANCE) + ADMIN_MAX_CONNECTIONS + RESERVED_FDS
    expect(reservedFds(c)).toBe(reserved)
    expect(frontMaxConnections(c, 4096)).toBe(4096 - reserved)
  })

  it('still gives the front a quarter when the pools alone could use up the limit', () => {
    // 3 instances x 128 connections is more than 256 descriptors.
    expect(frontMaxConnections(needs(3), 256)).toBe(64)
    expect(frontMaxConnections(needs(1), 2)).toBe(1)
  })

  it('an explicit limits.maxConnections wins', () => {
    expect(frontMaxConnections(needs(3, { maxConnections: 7 }), 256)).toBe(7)
  })

  it('is capped when the limit is unlimited', () => {
    expect(frontMaxConnections(needs(1), Number.MAX_SAFE_INTEGER)).toBe(1 << 20)
  })
})
