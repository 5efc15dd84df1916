// The consistent-hash properties (balance, minimal disruption, determinism), observed through Router.pick with random keys
// (the default threshold is never reached: every lease is released at once).
import { afterEach, describe, expect, it } from 'vitest'
import { Router } from '../../src/core/router.js'
import { ids, randomKeys } from '../helpers/keys.js'

const routers: Router[] = []
function router(instances: { id: string; weight?: number }[]): Router {
  const r = new Router({ strategy: 'prefix_aware', instances })
  routers.push(r)
  return r
}
afterEach(() => routers.splice(0).forEach((r) => r.close()))

function route(r: Router, keys: Uint8Array[]): string[] {
  return keys.map((k) => {
    const l = r.pick(k)
    l.release()
    return l.instance
  })
}

function shares(assigned: string[]): Map<string, number> {
  const m = new Map<string, number>()
  for (const a of assigned) m.set(a, (m.get(a) ?? 0) + 1)
  for (const [k, v] of m) m.set(k, v / assigned.length)
  return m
}

describe('consistent-hash ring', () => {
  it('is deterministic: same ids and weights give the same mapping whatever the order', () => {
    const list = ids(7).map((id, i) => ({ id, weight: 1 + (i % 3) }))
    const keys = randomKeys(50_000)
    const a = route(router(list), keys)
    const b = route(router([...list].reverse()), keys)
    const c = route(router([list[3]!, list[0]!, list[6]!, list[1]!, list[5]!, list[2]!, list[4]!]), keys)
    expect(b).toEqual(a)
    expect(c).toEqual(a)
  })

  it('is balanced: 7 equal instances, 1,000,000 keys, every share within ±5% of 1/7', () => {
    const assigned = route(router(ids(7).map((id) => ({ id }))), randomKeys(1_000_000))
    const s = shares(assigned)
    expect(s.size).toBe(7)
    for (const [id, share] of s) expect(Math.abs(share * 7 - 1), id).toBeLessThan(0.05)
  })

  it('gives shares proportional to weight within ±5%', () => {
    const list = ids(4).map((id, i) => ({ id, weight: i + 1 })) // weights 1,2,3,4 (sum 10)
    const s = shares(route(router(list), randomKeys(1_000_000)))
    for (const { id, weight } of list) expect(Math.abs(s.get(id)! / (weight / 10) - 1), id).toBeLessThan(0.05)
  })

  it('adding an 8th instance moves at most 1.1 × 1/8 of keys, all onto the new one', () => {
    const seven = ids(7).map((id) => ({ id }))
    const keys = randomKeys(400_000)
    const before = route(router(seven), keys)
    const r = router(seven)
    r.setInstances([...seven, { id: 'new-instance' }])
    const after = route(r, keys)
    let moved = 0
    let movedElsewhere = 0
    for (let i = 0; i < keys.length; i++) {
      if (before[i] !== after[i]) {
        moved++
        if (after[i] !== 'new-instance') movedElsewhere++
      }
    }
    expect(movedElsewhere).toBe(0)
    expect(moved / keys.length).toBeLessThanOrEqual(1.1 / 8)
    expect(moved / keys.length).toBeGreaterThan(0.9 / 8) // and the new one does take its share
  })

  it('removing an instance moves only that instance’s keys', () => {
    const seven = ids(7).map((id) => ({ id }))
    const keys = randomKeys(200_000)
    const r = router(seven)
    const before = route(r, keys)
    const gone = seven[2]!.id
    r.setInstances(seven.filter((m) => m.id !== gone))
    const after = route(r, keys)
    for (let i = 0; i < keys.length; i++) {
      if (before[i] !== gone) expect(after[i]).toBe(before[i])
      else expect(after[i]).not.toBe(gone)
    }
  })

  it('spreads the keys of a removed instance over the others, not onto one', () => {
    const seven = ids(7).map((id) => ({ id }))
    const r = router(seven)
    const keys = randomKeys(100_000)
    const before = route(r, keys)
    r.setInstances(seven.slice(1))
    const after = route(r, keys)
    const heirs = new Set(after.filter((_, i) => before[i] === seven[0]!.id))
    expect(heirs.size).toBe(6)
  })
})
