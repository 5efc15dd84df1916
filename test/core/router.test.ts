import { afterEach, describe, expect, it } from 'vitest'
import { Router, type Lease } from '../../src/core/router.js'
import { ids, randomKeys } from '../helpers/keys.js'

const routers: Router[] = []
function make(opts: ConstructorParameters<typeof Router>[0]): Router {
  const r = new Router(opts)
  routers.push(r)
  return r
}
afterEach(() => routers.splice(0).forEach((r) => r.close()))

const seven = ids(7).map((id) => ({ id }))
const prefix = 'You are a helpful assistant. '.repeat(200)

describe('prefix_aware picks', () => {
  it('sends the same prefix to the same instance, and only the first prefixLength counts', () => {
    const r = make({ instances: seven, prefixLength: 1024 })
    const first = r.pick(prefix + 'question one')
    first.release()
    for (const tail of ['question two', 'another', '']) {
      const l = r.pick(prefix + tail)
      expect(l.instance).toBe(first.instance)
      expect(l.overflow).toBe(false)
      l.release()
    }
    // Byte prefixes: bytes after prefixLength do not matter either.
    const bytes = Buffer.from(prefix)
    const b1 = r.pick(Buffer.concat([bytes.subarray(0, 1024), Buffer.from('x')]))
    const b2 = r.pick(Buffer.concat([bytes.subarray(0, 1024), Buffer.from('yz')]))
    expect(b2.instance).toBe(b1.instance)
    b1.release()
    b2.release()
  })

  it('cuts strings by code points, not UTF-16 units or bytes', () => {
    const r = make({ instances: seven, prefixLength: 1024 })
    const emoji = '🚀'.repeat(1024) // 2048 UTF-16 units, 4096 UTF-8 bytes
    const a = r.pick(emoji + 'a')
    const b = r.pick(emoji + 'b')
    expect(b.instance).toBe(a.instance)
    a.release()
    b.release()
    // The string key equals the UTF-8 bytes of its first 1024 code points.
    const keys = randomKeys(200).map((k) => Buffer.from(k).toString('hex').repeat(200))
    for (const s of keys) {
      const viaString = r.pick(s)
      const viaBytes = r.pick(Buffer.from(s.slice(0, 1024)))
      expect(viaBytes.instance).toBe(viaString.instance)
      viaString.release()
      viaBytes.release()
    }
  })

  it('overflows exactly at the threshold to a stable second home', () => {
    const r = make({ instances: seven, concurrencyThreshold: 3 })
    const held: Lease[] = []
    for (let i = 0; i < 3; i++) held.push(r.pick(prefix))
    const target = held[0]!.instance
    expect(held.every((l) => l.instance === target && !l.overflow)).toBe(true)
    expect(r.inFlight(target)).toBe(3)

    const spill = r.pick(prefix)
    expect(spill.overflow).toBe(true)
    expect(spill.instance).not.toBe(target)
    const second = spill.instance
    // The next two spill to the same place until it too is at the threshold.
    const more = [r.pick(prefix), r.pick(prefix)]
    expect(more.map((l) => l.instance)).toEqual([second, second])
    const third = r.pick(prefix)
    expect(third.instance).not.toBe(target)
    expect(third.instance).not.toBe(second)
    // Freeing one slot on the target brings the prefix home again.
    held.pop()!.release()
    const home = r.pick(prefix)
    expect(home.instance).toBe(target)
    expect(home.overflow).toBe(false)
    for (const l of [...held, spill, ...more, third, home]) l.release()
    for (const { id } of seven) expect(r.inFlight(id)).toBe(0)
  })

  it('when every instance is at the threshold, takes the one with the fewest in flight', () => {
    const three = ids(3).map((id) => ({ id }))
    const r = make({ instances: three, concurrencyThreshold: 1 })
    const leases = randomKeys(3).map(() => r.pick(prefix)) // fills all three (1 each)
    expect(new Set(leases.map((l) => l.instance)).size).toBe(3)
    const extra = r.pick(prefix) // all full; ties → the ring's own target
    expect(extra.instance).toBe(leases[0]!.instance)
    // Now the target has 2; release one elsewhere so that instance has the fewest.
    const lighter = leases[2]!
    lighter.release()
    const next = r.pick(prefix) // lighter's instance is below threshold again: walk finds it
    expect(next.instance).toBe(lighter.instance)
    const full = r.pick(prefix) // all at ≥1: fewest in flight are leases[1] and lighter's (1 each)
    expect([leases[1]!.instance, lighter.instance]).toContain(full.instance)
    expect(full.instance).not.toBe(leases[0]!.instance)
    for (const l of [...leases, extra, next, full]) l.release()
    for (const { id } of three) expect(r.inFlight(id)).toBe(0)
  })

  it('separates tenants: same prefix and tenant → same instance; different tenants spread', () => {
    const r = make({ instances: seven })
    const seen = new Set<string>()
    for (let t = 0; t < 40; t++) {
      const a = r.pick(prefix, { tenant: `tenant-${t}` })
      const b = r.pick(prefix, { tenant: `tenant-${t}` })
      expect(b.instance).toBe(a.instance)
      seen.add(a.instance)
      a.release()
      b.release()
    }
    expect(seen.size).toBeGreaterThan(3)
  })
})

describe('leases', () => {
  it('release is idempotent', () => {
    const r = make({ instances: seven })
    const a = r.pick(prefix)
    const b = r.pick(prefix)
    expect(r.inFlight(a.instance)).toBe(2)
    a.release()
    a.release()
    a.release()
    expect(a.released).toBe(true)
    expect(r.inFlight(a.instance)).toBe(1)
    b.release()
    expect(r.inFlight(a.instance)).toBe(0)
  })

  it('a lease taken before setInstances releases its own counter; a removed slot is freed on its last release', () => {
    const r = make({ instances: seven })
    const l1 = r.pick(prefix)
    const l2 = r.pick(prefix)
    const gone = l1.instance
    const rest = seven.filter((m) => m.id !== gone)
    r.setInstances(rest)
    expect(r.stats().slotsInUse).toBe(7) // 6 members + 1 draining
    expect(r.inFlight(gone)).toBe(2) // still visible while draining
    expect(r.instances().map((i) => i.id)).not.toContain(gone)
    const moved = r.pick(prefix)
    expect(moved.instance).not.toBe(gone)
    l1.release()
    expect(r.stats().slotsInUse).toBe(7)
    l2.release()
    expect(r.stats().slotsInUse).toBe(6)
    expect(r.inFlight(gone)).toBe(0)
    moved.release()
    expect(r.instances().every((i) => i.inFlight === 0)).toBe(true)
  })

  it('re-adding a draining instance gives it its old counter back', () => {
    const r = make({ instances: seven })
    const l = r.pick(prefix)
    r.setInstances(seven.filter((m) => m.id !== l.instance))
    r.setInstances(seven)
    expect(r.inFlight(l.instance)).toBe(1)
    expect(r.stats().slotsInUse).toBe(7)
    l.release()
    expect(r.inFlight(l.instance)).toBe(0)
  })

  it('many membership swaps with leases outstanding leave every counter at 0', () => {
    const r = make({ instances: seven, concurrencyThreshold: 2 })
    const all = ids(12).map((id) => ({ id }))
    const held: Lease[] = []
    const keys = randomKeys(2000)
    keys.forEach((k, i) => {
      held.push(r.pick(k))
      if (i % 50 === 0) r.setInstances(all.filter((_, j) => (j + i) % 3 !== 0))
      if (i % 3 === 0) held.splice(Math.floor(held.length / 2), 1)[0]!.release()
    })
    held.forEach((l) => l.release())
    r.setInstances(seven)
    expect(r.instances().map((i) => i.inFlight)).toEqual(Array(7).fill(0))
    expect(r.stats().slotsInUse).toBe(7)
  })
})

describe('other strategies', () => {
  it('least_outstanding_requests picks the least loaded', () => {
    const r = make({ strategy: 'LEAST_OUTSTANDING_REQUESTS', instances: ids(3).map((id) => ({ id })) })
    const leases = [r.pick('a'), r.pick('a'), r.pick('a')]
    expect(new Set(leases.map((l) => l.instance)).size).toBe(3)
    leases[1]!.release()
    const next = r.pick('a')
    expect(next.instance).toBe(leases[1]!.instance)
    for (const l of [...leases, next]) l.release()
  })

  it('random spreads the same prefix over every instance', () => {
    const r = make({ strategy: 'random', instances: seven })
    const seen = new Map<string, number>()
    for (let i = 0; i < 7000; i++) {
      const l = r.pick(prefix)
      seen.set(l.instance, (seen.get(l.instance) ?? 0) + 1)
      l.release()
    }
    expect(seen.size).toBe(7)
    for (const n of seen.values()) expect(n).toBeGreaterThan(700)
  })

  it('configure() switches strategy for later picks without touching leases in flight', () => {
    const r = make({ instances: seven })
    const before = r.pick(prefix)
    r.configure({ strategy: 'random' })
    expect(r.params.strategy).toBe('random')
    const targets = new Set<string>()
    for (let i = 0; i < 200; i++) {
      const l = r.pick(prefix)
      targets.add(l.instance)
      l.release()
    }
    expect(targets.size).toBeGreaterThan(1)
    expect(r.inFlight(before.instance)).toBe(1)
    before.release()
    expect(r.inFlight(before.instance)).toBe(0)
  })
})

describe('lifecycle', () => {
  it('a closed router refuses picks with ROUTER_CLOSED; a lease released after close does nothing', () => {
    const r = new Router({ instances: seven })
    const l = r.pick(prefix)
    r.close()
    expect(() => r.pick(prefix)).toThrow(expect.objectContaining({ code: 'ROUTER_CLOSED' }))
    expect(() => l.release()).not.toThrow()
    r.close()
  })

  it('reports the ring size and memory', () => {
    const r = make({ instances: seven, vnodes: 1000 })
    const s = r.stats()
    expect(s.ringPoints).toBe(7000)
    expect(s.ringBytes).toBeGreaterThan(7000 * 10)
  })
})

describe('groups (models and adapters)', () => {
  const fleet = ids(6).map((id, i) => ({ id, groups: i < 2 ? ['base', 'lora-a'] : ['base'] }))

  it('a group limits candidates to the instances listing it, for every strategy', () => {
    const allowed = new Set(fleet.slice(0, 2).map((m) => m.id))
    for (const strategy of ['prefix_aware', 'random', 'least_outstanding_requests']) {
      const r = make({ strategy, instances: fleet, concurrencyThreshold: 2 })
      const held = randomKeys(300).map((k) => r.pick(k, { group: 'lora-a' }))
      expect(held.every((l) => allowed.has(l.instance)), strategy).toBe(true)
      expect(new Set(held.map((l) => l.instance)).size, strategy).toBe(2)
      held.forEach((l) => l.release())
    }
  })

  it('within a group, prefix_aware is consistent hashing over that subset', () => {
    const r = make({ instances: fleet })
    const sub = make({ instances: fleet.slice(0, 2) })
    for (const k of randomKeys(2000)) {
      const a = r.pick(k, { group: 'lora-a' })
      const b = sub.pick(k)
      expect(a.instance).toBe(b.instance)
      a.release()
      b.release()
    }
  })

  it('counters are per instance across groups: overflow sees load from other groups', () => {
    const r = make({ instances: fleet, concurrencyThreshold: 1 })
    const first = r.pick(prefix, { group: 'lora-a' })
    const second = r.pick(prefix, { group: 'lora-a' })
    expect(second.instance).not.toBe(first.instance)
    expect(second.overflow).toBe(true)
    first.release()
    second.release()
  })

  it('an unknown group throws ROUTER_NO_GROUP and takes no lease', () => {
    const r = make({ instances: fleet })
    expect(() => r.pick(prefix, { group: 'nope' })).toThrow(expect.objectContaining({ code: 'ROUTER_NO_GROUP' }))
    expect(r.instances().every((i) => i.inFlight === 0)).toBe(true)
    expect(r.instances().find((i) => i.id === fleet[0]!.id)!.groups).toEqual(['base', 'lora-a'])
  })

  it('a group follows membership changes: gone, then served again, then new', () => {
    const r = make({ instances: fleet })
    const inGroup = (l: Lease) => fleet.slice(0, 2).some((i) => i.id === l.instance)
    const before = r.pick(prefix, { group: 'lora-a' })
    expect(inGroup(before)).toBe(true)
    before.release()
    r.setInstances(fleet.map((i) => ({ id: i.id })))
    expect(() => r.pick(prefix, { group: 'lora-a' })).toThrow(expect.objectContaining({ code: 'ROUTER_NO_GROUP' }))
    expect(() => r.pick(prefix, { group: 'lora-b' })).toThrow(expect.objectContaining({ code: 'ROUTER_NO_GROUP' }))
    r.setInstances([...fleet, { id: 'http://10.9.9.9:8000', groups: ['lora-b'] }])
    const again = r.pick(prefix, { group: 'lora-a' })
    expect(again.instance).toBe(before.instance)
    again.release()
    const added = r.pick(prefix, { group: 'lora-b' })
    expect(added.instance).toBe('http://10.9.9.9:8000')
    added.release()
  })
})

describe('avoid (a retry asks for the next choice)', () => {
  const four = ids(4).map((id) => ({ id }))
  for (const strategy of ['prefix_aware', 'longest_prefix', 'least_outstanding_requests', 'random'] as const) {
    it(`${strategy}: never picks an avoided instance, and gives up when every instance is avoided`, () => {
      const r = make({ instances: four, strategy })
      const keys = randomKeys(200)
      for (const k of keys) {
        const first = r.pick(k)
        const second = r.pick(k, { avoid: [first] })
        expect(second.instance).not.toBe(first.instance)
        const third = r.pick(k, { avoid: [first, second] })
        expect([first.instance, second.instance]).not.toContain(third.instance)
        const fourth = r.pick(k, { avoid: [first, second, third] })
        expect(() => r.pick(k, { avoid: [first, second, third, fourth] })).toThrow(expect.objectContaining({ code: 'ROUTER_NO_INSTANCES' }))
        for (const l of [first, second, third, fourth]) l.release()
      }
      expect(r.instances().every((i) => i.inFlight === 0)).toBe(true)
    })
  }

  it('prefix_aware: the second choice is the next instance on the ring, the same every time', () => {
    const r = make({ instances: ids(5).map((id) => ({ id })), strategy: 'prefix_aware' })
    for (const k of randomKeys(100)) {
      const a = r.pick(k)
      const b1 = r.pick(k, { avoid: [a] })
      b1.release()
      const b2 = r.pick(k, { avoid: [a] })
      b2.release()
      a.release()
      expect(b2.instance).toBe(b1.instance)
    }
  })

  it('honours as many avoided tries as serve can make (retries.max 10: eleven tries)', () => {
    const r = make({ instances: ids(12).map((id) => ({ id })), strategy: 'prefix_aware' })
    for (const k of randomKeys(20)) {
      const tries = [r.pick(k)]
      for (let i = 1; i < 12; i++) {
        const next = r.pick(k, { avoid: tries })
        expect(tries.map((l) => l.instance)).not.toContain(next.instance)
        tries.push(next)
      }
      for (const l of tries) l.release()
    }
    expect(r.instances().every((i) => i.inFlight === 0)).toBe(true)
  })

  it('rejects an avoid list that is not leases', () => {
    const r = make({ instances: four })
    expect(() => r.pick('x'.repeat(10), { avoid: ['a' as never] })).toThrow(expect.objectContaining({ code: 'ERR_INVALID_ARG_TYPE' }))
  })
})
