// The longest_prefix strategy: follow the instance that was sent the longest part of this
// prompt; without a match that tells instances apart, place by the consistent hash.
import { afterEach, describe, expect, it } from 'vitest'
import { xxh3, xxh3Blocks } from '../../src/core/hash.js'
import { Router, type Lease } from '../../src/core/router.js'
import { ids } from '../helpers/keys.js'

const routers: Router[] = []
function make(opts: Partial<ConstructorParameters<typeof Router>[0]> = {}): Router {
  const r = new Router({ strategy: 'longest_prefix', prefixLength: 65536, instances: ids(7).map((id) => ({ id })), ...opts })
  routers.push(r)
  return r
}
afterEach(() => routers.splice(0).forEach((r) => r.close()))

const once = (r: Router, text: string, tenant?: string) => {
  const l = r.pick(text, tenant === undefined ? undefined : { tenant })
  l.release()
  return l.instance
}
const words = (seed: number, n: number) => Array.from({ length: n }, (_, i) => `w${(seed * 7919 + i * 104729) % 100000}`).join(' ')

describe('xxh3Blocks', () => {
  it('chains block hashes: block i is seeded with block i-1', () => {
    const data = Buffer.from(words(1, 200))
    const chain = xxh3Blocks(data, 64, 5n)
    expect(chain.length).toBe(Math.floor(data.length / 64))
    let h = 5n
    for (let i = 0; i < chain.length; i++) {
      h = xxh3(data.subarray(i * 64, (i + 1) * 64), h)
      expect(chain[i]).toBe(h)
    }
    expect(xxh3Blocks(data.toString(), 64, 5n)).toEqual(chain)
    expect(() => xxh3Blocks(data, 0)).toThrow(/blockBytes must be an integer from 1 to 1048576/)
  })
})

describe('longest_prefix', () => {
  it('sends each turn of a conversation where the previous turns went, though its hash points elsewhere', () => {
    const r = make()
    const hashOnly = make({ strategy: 'prefix_aware' })
    let followed = 0
    let hashWouldDiffer = 0
    for (let c = 0; c < 30; c++) {
      let history = `system: you are assistant ${c}. ${words(c, 60)}`
      const home = once(r, history)
      for (let turn = 0; turn < 4; turn++) {
        history += ` user: ${words(c * 10 + turn, 40)} assistant: ${words(c * 100 + turn, 40)}`
        if (once(r, history) === home) followed++
        if (once(hashOnly, history) !== home) hashWouldDiffer++
      }
    }
    expect(followed).toBe(120)
    expect(hashWouldDiffer).toBeGreaterThan(60) // the hash of the grown prompt alone would have scattered them
  })

  it('a popular system prompt spreads under load, then new conversations are placed by hash', () => {
    const r = make({ concurrencyThreshold: 2 })
    const system = `system: ${words(999, 200)} `
    // 14 conversations at once with threshold 2: the first holder fills, overflow walks on,
    // and the system prompt ends up cached on every instance.
    const held = Array.from({ length: 14 }, (_, c) => r.pick(`${system}user: ${words(10_000 + c, 30)}`))
    expect(new Set(held.map((l) => l.instance)).size).toBe(7)
    held.forEach((l) => l.release())
    // Now every instance holds it: the match no longer tells them apart, so the hash of each
    // whole prompt places it and the load spreads.
    const seen = new Map<string, number>()
    for (let c = 0; c < 700; c++) {
      const i = once(r, `${system}user: ${words(c, 30)}`)
      seen.set(i, (seen.get(i) ?? 0) + 1)
    }
    expect(seen.size).toBe(7)
    for (const n of seen.values()) expect(n).toBeGreaterThan(50)
  })

  it('among instances holding the same prefix, distinct prompts spread (ring order, not one favourite)', () => {
    const r = make({ concurrencyThreshold: 1 })
    const doc = `doc: ${words(7, 300)} `
    const first = [r.pick(`${doc}a`), r.pick(`${doc}b`), r.pick(`${doc}c`)] // three holders now
    const holders = new Set(first.map((l) => l.instance))
    expect(holders.size).toBe(3)
    first.forEach((l) => l.release())
    const seen = new Set<string>()
    for (let q = 0; q < 12; q++) seen.add(once(r, `${doc}question ${q} ${words(q, 20)}`))
    expect([...seen].every((i) => holders.has(i))).toBe(true)
    expect(seen.size).toBe(3)
    // Asked about in more than one instance's fair share of requests (here all of them), the
    // document is common: to be cached everywhere, so its questions spread over the fleet.
    const later = new Set<string>()
    for (let q = 12; q < 212; q++) later.add(once(r, `${doc}question ${q} ${words(q, 20)}`))
    expect(later.size).toBe(7)
  })

  it('a short prefix that one instance happens to hold does not pull distinct documents to it', () => {
    const r = make({ instances: ids(4).map((id) => ({ id })) })
    const system = 'system: answer from the document. ' // about one block, shared by every request
    const first = once(r, `${system}${words(0, 600)}`)
    const seen = new Map<string, number>()
    for (let d = 1; d < 400; d++) {
      const i = once(r, `${system}${words(d, 600)}`)
      seen.set(i, (seen.get(i) ?? 0) + 1)
    }
    expect(seen.size).toBe(4)
    expect(seen.get(first)!).toBeLessThan(200) // no favourite: about a quarter each
  })

  it('an added instance gets its share of new keys at once, while known documents stay home', () => {
    const r = make({ instances: ids(4).map((id) => ({ id })) })
    const homes = Array.from({ length: 50 }, (_, d) => once(r, `doc ${d}: ${words(d, 300)}`))
    r.setInstances(ids(5).map((id) => ({ id })))
    const added = ids(5)[4]!
    homes.forEach((home, d) => expect(once(r, `doc ${d}: ${words(d, 300)} question`)).toBe(home))
    let toAdded = 0
    for (let d = 1000; d < 1400; d++) if (once(r, `doc ${d}: ${words(d, 300)}`) === added) toAdded++
    expect(toAdded).toBeGreaterThan(40) // ~1/5 of 400 new documents
  })

  it('agrees across router replicas with separate indexes when nothing matches', () => {
    const a = make({ placement: 'hash' })
    const b = make({ placement: 'hash' })
    for (let i = 0; i < 200; i++) {
      const text = `fresh prompt ${i}: ${words(i, 50)}`
      expect(once(a, text)).toBe(once(b, text))
    }
  })

  it('with an anchor, replicas that each see only some turns keep a conversation on one instance', () => {
    // Independent replicas: hash placement, so they agree where a new conversation goes.
    const a = make({ placement: 'hash' })
    const b = make({ placement: 'hash' })
    const plainA = make({ placement: 'hash' })
    const plainB = make({ placement: 'hash' })
    let together = 0
    let scattered = 0
    for (let c = 0; c < 40; c++) {
      const opening = `system: app ${c % 3}. ${words(c % 3, 40)} user: ${words(1000 + c, 30)}`
      let history = opening
      const homes = new Set<string>()
      const plainHomes = new Set<string>()
      for (let turn = 0; turn < 4; turn++) {
        if (turn > 0) history += ` assistant: ${words(c * 10 + turn, 60)} user: ${words(c * 100 + turn, 20)}`
        const replica = turn % 2 === 0 ? a : b // each replica sees every other turn
        const l = replica.pick(history, { anchor: opening.length })
        homes.add(l.instance)
        l.release()
        plainHomes.add(once(turn % 2 === 0 ? plainA : plainB, history))
      }
      if (homes.size === 1) together++
      if (plainHomes.size > 1) scattered++
    }
    expect(together).toBe(40)
    expect(scattered).toBeGreaterThan(10) // without the anchor the replicas disagree
    expect(() => a.pick('x', { anchor: -1 })).toThrow(/anchor must be a non-negative integer/)
  })

  it('the same prompt with another tenant id is not a match', () => {
    const r = make()
    const text = words(5, 300)
    const homes = new Set<string>()
    for (let t = 0; t < 30; t++) {
      const home = once(r, text, `tenant-${t}`)
      expect(once(r, `${text} more`, `tenant-${t}`)).toBe(home)
      homes.add(home)
    }
    expect(homes.size).toBeGreaterThan(3)
  })

  it('overflows at the threshold to the next best match, then by the ring', () => {
    const r = make({ concurrencyThreshold: 2, loadFactor: 100 }) // the threshold alone
    const base = `doc: ${words(42, 300)}`
    const home = once(r, base)
    const held: Lease[] = [r.pick(`${base} q1`), r.pick(`${base} q2`)]
    expect(held.every((l) => l.instance === home && !l.overflow)).toBe(true)
    const spill = r.pick(`${base} q3`)
    expect(spill.instance).not.toBe(home)
    expect(spill.overflow).toBe(true)
    held.push(spill)
    held.forEach((l) => l.release())
    expect(r.instances().every((i) => i.inFlight === 0)).toBe(true)
  })

  it('keeps its index within indexBlocks per instance and reports its memory', () => {
    const r = make({ indexBlocks: 100, instances: ids(3).map((id) => ({ id })) })
    for (let i = 0; i < 300; i++) once(r, words(i, 200)) // ~1,500 bytes = ~23 blocks each
    const s = r.stats()
    expect(s.indexEntries).toBeLessThanOrEqual(300)
    expect(s.indexEntries).toBeGreaterThan(200)
    expect(s.indexBytes).toBeGreaterThan(0)
    const per = make({ instances: ids(3).map((id, i) => ({ id, indexBlocks: 10 * (i + 1) })) })
    for (let i = 0; i < 100; i++) once(per, words(i, 200))
    expect(per.stats().indexEntries).toBeLessThanOrEqual(60)
  })

  it('removing an instance forgets its blocks once it has drained', () => {
    const r = make({ instances: ids(3).map((id) => ({ id })) })
    for (let i = 0; i < 30; i++) once(r, words(i, 200))
    const before = r.stats().indexEntries
    r.setInstances(ids(2).map((id) => ({ id })))
    expect(r.stats().indexEntries).toBeLessThan(before)
  })

  it('respects groups', () => {
    const fleet = ids(4).map((id, i) => ({ id, groups: i < 2 ? ['a'] : ['b'] }))
    const r = make({ instances: fleet })
    for (let i = 0; i < 50; i++) {
      const l = r.pick(words(i, 100), { group: 'b' })
      expect([fleet[2]!.id, fleet[3]!.id]).toContain(l.instance)
      l.release()
    }
  })

  it('validates its options', () => {
    expect(() => make({ blockSize: 8 })).toThrow(/blockSize must be an integer from 16 to 4096/)
    expect(() => make({ indexBlocks: -1 })).toThrow(/indexBlocks must be an integer from 0 to 268435456/)
    expect(() => make({ instances: [{ id: 'x', indexBlocks: 0 }] })).toThrow(/instances\[0\]\.indexBlocks must be an integer from 1/)
    expect(() => make({ placement: 'spread' })).toThrow(/placement must be one of hash, balanced; got "spread"/)
    expect(make({ placement: 'BALANCED' }).params.placement).toBe('balanced')
    expect(make().params.placement).toBe('balanced')
    expect(() => make({ loadFactor: 0.5 })).toThrow(/loadFactor must be a number from 1 to 100; got 0.5/)
    expect(() => make({ prefillWeight: -1 })).toThrow(/prefillWeight must be a number from 0 to 100/)
    expect(() => make({ matchLength: 100 })).toThrow(/matchLength must be an integer from 1024 to 262144/)
    expect(make().params.concurrencyThreshold).toBe(1024) // no fixed cap unless given
    expect(make({ concurrencyThreshold: 10 }).params.concurrencyThreshold).toBe(10)
  })
})

describe('longest_prefix with placement: balanced', () => {
  it('places new prompts away from an instance with a long prefill queue, and leaves placed ones where they are', () => {
    // Eight long prompts routed and not yet answered (no first token): their prefill is
    // queued on their instances. Then new documents arrive.
    const run = (placement: 'hash' | 'balanced') => {
      const r = make({ placement })
      const held = Array.from({ length: 8 }, (_, c) => r.pick(`busy ${c}: ${words(500 + c, 200)}`))
      const queued = new Map(r.instances().map((i) => [i.id, i.queuedPrefillBlocks]))
      const busiest = [...queued].sort((x, y) => y[1] - x[1])[0]![0]
      expect(queued.get(busiest)).toBeGreaterThan(0)
      let toBusiest = 0
      const homes: string[] = []
      for (let d = 0; d < 210; d++) {
        const home = once(r, `doc ${d}: ${words(d, 300)}`)
        homes.push(home)
        if (home === busiest) toBusiest++
      }
      held.forEach((l) => l.release())
      expect(r.instances().every((i) => i.inFlight === 0 && i.queuedPrefillBlocks === 0)).toBe(true)
      // Once placed, a document stays home, though the instances are all idle now.
      homes.forEach((home, d) => expect(once(r, `doc ${d}: ${words(d, 300)} question`)).toBe(home))
      return toBusiest
    }
    expect(run('hash')).toBeGreaterThan(15) // ~1/7 of 210: hash placement takes the home, whatever its queue
    expect(run('balanced')).toBe(0) // the least queued instance is always a candidate
  })

  it('first tokens empty the queue: a busy instance takes new prompts again', () => {
    const r = make()
    const held = Array.from({ length: 8 }, (_, c) => r.pick(`busy ${c}: ${words(500 + c, 200)}`))
    expect(r.instances().some((i) => i.queuedPrefillBlocks > 0)).toBe(true)
    held.forEach((l) => l.firstToken())
    held.forEach((l) => l.firstToken()) // a second call does nothing
    expect(r.instances().every((i) => i.queuedPrefillBlocks === 0 && i.inFlight > 0 === held.some((l) => l.instance === i.id))).toBe(true)
    held.forEach((l) => l.release())
    expect(r.instances().every((i) => i.inFlight === 0 && i.queuedPrefillBlocks === 0)).toBe(true)
  })

  it('keeps every instance within 1.5× its fair share when one document draws a quarter of all requests', () => {
    // 70 documents, the first asked about in ~24% of requests (more than 1/7, so it is common),
    // 3 requests in flight: too few for the in-flight bound to bite.
    for (const placement of ['hash', 'balanced'] as const) {
      const r = make({ placement })
      const count = new Map<string, number>()
      const open: Lease[] = []
      for (let i = 0; i < 3000; i++) {
        const d = Math.floor(70 * ((i * 0.6180339887) % 1) ** 3) // skewed towards low d
        const l = r.pick(`doc ${d}: ${words(d, 300)} question ${i}`)
        count.set(l.instance, (count.get(l.instance) ?? 0) + 1)
        open.push(l)
        if (open.length > 3) open.shift()!.release()
      }
      open.forEach((l) => l.release())
      expect(count.size, placement).toBe(7)
      expect(Math.max(...count.values()), `${placement}: ${[...count.values()].join(', ')}`).toBeLessThanOrEqual((1.5 * 3000) / 7)
    }
  })

  it('does not starve an instance that lacks a prefix everyone else shares', () => {
    // Three instances learn a shared system prompt; then a fourth joins without it. New
    // prompts, with some always in flight, must reach the newcomer too.
    const fleet = ids(4).map((id) => ({ id }))
    const r = make({ instances: fleet.slice(0, 3), placement: 'balanced' })
    const system = `system: ${words(77, 40)} `
    for (let i = 0; i < 30; i++) once(r, `${system}user: ${words(9000 + i, 300)}`)
    r.setInstances(fleet)
    const newcomer = fleet[3]!.id
    const open: Lease[] = []
    let toNewcomer = 0
    for (let i = 0; i < 400; i++) {
      const l = r.pick(`${system}user: ${words(i, 300)}`)
      if (l.instance === newcomer) toNewcomer++
      open.push(l)
      if (open.length > 8) open.shift()!.release()
    }
    open.forEach((l) => l.release())
    expect(toNewcomer, `newcomer took ${toNewcomer} of 400`).toBeGreaterThan(400 / 8) // holding the system prompt must not outrank load
  })

  it('stays within the request\'s group', () => {
    const fleet = ids(6).map((id, i) => ({ id, groups: i % 2 === 0 ? ['a'] : ['b'] }))
    const r = make({ instances: fleet, placement: 'balanced' })
    const held: Lease[] = []
    for (let i = 0; i < 60; i++) {
      const l = r.pick(words(i, 100), { group: 'b' })
      expect([fleet[1]!.id, fleet[3]!.id, fleet[5]!.id]).toContain(l.instance)
      held.push(l)
    }
    held.forEach((l) => l.release())
    expect(r.instances().every((i) => i.inFlight === 0)).toBe(true)
  })
})
