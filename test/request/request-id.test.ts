import { describe, expect, it } from 'vitest'
import { requestIdOf, uuid } from '../../src/request/request-id.js'

describe('request ids', () => {
  it('makes version 4 UUIDs (RFC 9562 layout, variant 10), none repeated, over several batches of random bytes', () => {
    const ids = Array.from({ length: 1000 }, uuid)
    for (const id of ids) expect(id).toMatch(/^[0-9a-f]{8}-[0-9a-f]{4}-4[0-9a-f]{3}-[89ab][0-9a-f]{3}-[0-9a-f]{12}$/)
    expect(new Set(ids).size).toBe(ids.length)
    // Every hex digit shows up in every free position: the bytes are spelled, not a fixed pattern.
    for (const pos of [0, 9, 15, 20, 35]) expect(new Set(ids.map((s) => s[pos])).size).toBe(16)
  })

  it("keeps a usable client id and replaces an unusable one", () => {
    expect(requestIdOf('abc-1')).toEqual({ id: 'abc-1', replaced: false })
    const r = requestIdOf('bad\nid')
    expect(r.replaced).toBe(true)
    expect(r.id).toMatch(/^[0-9a-f-]{36}$/)
    expect(requestIdOf(undefined).replaced).toBe(false)
  })
})
