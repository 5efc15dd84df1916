import { describe, expect, it } from 'vitest'
import { RestartBackoff } from '../../src/cluster/backoff.js'

describe('worker restart backoff', () => {
  it('replaces an odd crash at once, doubles the wait while workers keep dying, and starts over after a quiet spell', () => {
    const b = new RestartBackoff({ baseMs: 100, maxMs: 1000, resetAfterMs: 60_000 })
    const waits = [0, 10, 20, 30, 40, 50, 60].map((t) => b.next(t))
    expect(waits).toEqual([0, 100, 200, 400, 800, 1000, 1000])
    expect(b.next(60 + 60_000)).toBe(0)
    expect(b.next(60 + 60_001)).toBe(100)
  })
})
