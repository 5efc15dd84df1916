// A pick names the instances its strategy would choose next (PickOptions.alternates), ranked by
// the strategy's own measure and without side effects: no lease, no queued prefill, no record
// in the prefix index. The endpoint picker's fallback list and a second try read them.
import { afterEach, describe, expect, it } from 'vitest'
import { Router, type Lease } from '../../src/core/router.js'
import { STRATEGIES } from '../../src/core/options.js'
import { ids } from '../helpers/keys.js'

const routers: Router[] = []
function make(strategy: string, n = 5, extra: object = {}): Router {
  const r = new Router({ strategy, prefixLength: 1024, instances: ids(n).map((id) => ({ id })), ...extra })
  routers.push(r)
  return r
}
afterEach(() => routers.splice(0).forEach((r) => r.close()))

const prompt = (i: number) => `${'a shared system prompt, long enough to fill several blocks of routing text. '.repeat(8)} question ${i} ${'x'.repeat(300)}`

describe('alternates', () => {
  it.each(STRATEGIES)('%s: distinct members other than the chosen one, at most as many as asked, with no lease taken', (strategy) => {
    const r = make(strategy)
    for (let i = 0; i < 20; i++) {
      const l = r.pick(prompt(i), { alternates: 3 })
      expect(l.alternates).toHaveLength(3)
      expect(new Set(l.alternates).size).toBe(3)
      expect(l.alternates).not.toContain(l.instance)
      for (const a of l.alternates) expect(ids(5)).toContain(a)
      // Only the chosen instance counts the request.
      for (const row of r.instances()) expect(row.inFlight).toBe(row.id === l.instance ? 1 : 0)
      for (const row of r.instances()) if (row.id !== l.instance) expect(row.queuedPrefillBlocks).toBe(0)
      l.release()
    }
  })

  it('are empty unless asked, and never more than the other members', () => {
    const r = make('longest_prefix', 3)
    const plain = r.pick(prompt(1))
    expect(plain.alternates).toEqual([])
    plain.release()
    const l = r.pick(prompt(2), { alternates: 8 })
    expect(l.alternates).toHaveLength(2)
    l.release()
    expect(() => r.pick(prompt(3), { alternates: 9 })).toThrow(/alternates/)
  })

  it('stay inside the group asked for', () => {
    const all = ids(6)
    const r = new Router({ strategy: 'longest_prefix', instances: all.map((id, i) => ({ id, groups: [i < 3 ? 'a' : 'b'] })) })
    routers.push(r)
    const l = r.pick(prompt(1), { group: 'b', alternates: 5 })
    expect([l.instance, ...l.alternates].sort()).toEqual(all.slice(3).sort())
    l.release()
  })

  it('prefix_aware: the first alternate is where the next request overflows when the target is full', () => {
    const r = make('prefix_aware', 5, { concurrencyThreshold: 1 })
    const held: Lease[] = []
    const first = r.pick(prompt(1), { alternates: 4 })
    held.push(first)
    // The target is at its threshold: each further request goes to the next alternate in turn.
    for (const expected of first.alternates) {
      const l = r.pick(prompt(1))
      expect(l.instance).toBe(expected)
      expect(l.overflow).toBe(true)
      held.push(l)
    }
    held.forEach((l) => l.release())
  })

  it('least_outstanding_requests: ranked by requests in flight', () => {
    // The engines' reported load stands in for requests in flight (engineLoadAll counts it).
    const r = make('least_outstanding_requests', 4, { engineLoadAll: true })
    const all = ids(4)
    all.forEach((id, i) => r.setEngineLoad(id, 3 - i))
    const l = r.pick('y', { alternates: 3 })
    expect(l.instance).toBe(all[3])
    expect(l.alternates).toEqual([all[2], all[1], all[0]])
    l.release()
  })

  it('longest_prefix: the instance holding the prompt ranks first among the alternates when load sends the request elsewhere', () => {
    const r = make('longest_prefix', 4, { concurrencyThreshold: 1 })
    const p = prompt(7)
    const a = r.pick(p)
    a.release()
    // The holder: a second pick of the same prompt goes back to it, holding all of it.
    const again = r.pick(p)
    expect(again.instance).toBe(a.instance)
    expect(again.heldBlocks).toBe(again.blocks)
    expect(again.blocks).toBeGreaterThan(0)
    // With it at the threshold, the next pick goes elsewhere and names it among the alternates
    // (full members rank after those with room, so it comes after them).
    const b = r.pick(p, { alternates: 3 })
    expect(b.instance).not.toBe(a.instance)
    expect(b.overflow).toBe(true)
    expect(b.heldBlocks).toBeLessThan(b.blocks)
    expect(b.alternates).toContain(a.instance)
    again.release()
    b.release()
    // With room again, the holder is first: ranked by cost, it saves the most.
    const c = r.pick(prompt(7), { alternates: 3 })
    expect(c.instance).toBe(a.instance)
    c.release()
  })

  it('do not change what later picks choose', () => {
    const plain = make('longest_prefix', 5)
    const asking = make('longest_prefix', 5)
    for (let i = 0; i < 60; i++) {
      const p = prompt(i % 9)
      const x = plain.pick(p)
      const y = asking.pick(p, { alternates: 4 })
      expect(y.instance).toBe(x.instance)
      x.release()
      y.release()
    }
  })
})
