// One rule for a tenant id, however it arrives: the header, the body's prompt_cache_key, or
// pick()'s `tenant`. A change to it in one of them alone would route a tenant one way and
// refuse it another.
import { describe, expect, it } from 'vitest'
import { Router } from '../../src/core/router.js'
import { checkTenant, tenantOf } from '../../src/core/key/tenant.js'

const accepts = (f: () => unknown) => {
  try {
    f()
    return true
  } catch {
    return false
  }
}

describe('the tenant rule', () => {
  const cases: [string, boolean][] = [
    ['', false],
    ['a', true],
    ['a'.repeat(64), true],
    ['a'.repeat(65), false],
    [' ', true],
    ['~', true],
    ['\x1f', false],
    ['\x7f', false],
    ['é', false],
  ]

  it.each(cases)('%j: the header, prompt_cache_key and pick() agree (%s)', (id, ok) => {
    expect([accepts(() => tenantOf(id)), accepts(() => tenantOf(undefined, id)), accepts(() => checkTenant(id))]).toEqual([ok, ok, ok])
  })

  it('is what a Router checks its picks by', () => {
    const r = new Router({ instances: [{ id: 'a' }, { id: 'b' }] })
    try {
      const lease = r.pick('hello', { tenant: 'a'.repeat(64) })
      expect(lease.instance).toMatch(/^[ab]$/)
      lease.release()
      expect(() => r.pick('hello', { tenant: 'a'.repeat(65) })).toThrow(/1 to 64 printable ASCII characters/)
    } finally {
      r.close()
    }
  })
})
