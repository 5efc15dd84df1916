// The bucket the picker keeps per gateway connection mirrors nghttp2's stream-reset limit
// (nghttp2_ratelim: 1,000, refilled by 33 for each whole second), so that its graceful GOAWAY
// goes out while nghttp2 still has tokens left. Time is given, not waited for.
import { describe, expect, it } from 'vitest'
import { RESET_BURST, RESET_RATE, ResetBucket } from '../../src/epp/reset-limit.js'

describe("the stream-reset bucket (nghttp2's limit, mirrored)", () => {
  it('starts full, and a reset takes one token', () => {
    const b = new ResetBucket(RESET_BURST, RESET_RATE, 100)
    expect(b.take(100)).toBe(RESET_BURST - 1)
    for (let i = 0; i < 498; i++) b.take(100)
    expect(b.take(100)).toBe(RESET_BURST / 2)
  })

  it('refills by the rate for each whole second passed, never above the burst', () => {
    const b = new ResetBucket(1_000, 33, 0)
    for (let i = 0; i < 900; i++) b.take(0)
    // 100 left; two seconds later 166 more, less the one taken.
    expect(b.take(2)).toBe(100 + 66 - 1)
    expect(b.take(3)).toBe(165 + 33 - 1)
    expect(b.take(1_000)).toBe(999)
  })

  it('does not go below zero', () => {
    const b = new ResetBucket(3, 1, 0)
    for (let i = 0; i < 5; i++) b.take(0)
    expect(b.take(0)).toBe(0)
  })
})
