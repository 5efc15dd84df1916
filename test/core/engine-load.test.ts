// The engines' reported load (Router.setEngineLoad): requests in flight at an instance from
// other clients, which this router's own leases do not count. longest_prefix always weighs it;
// least_outstanding_requests and prefix_aware only with engineLoadAll.
import { afterEach, describe, expect, it } from 'vitest'
import { Router } from '../../src/core/router.js'

const routers: Router[] = []
function make(opts: ConstructorParameters<typeof Router>[0]): Router {
  const r = new Router(opts)
  routers.push(r)
  return r
}
afterEach(() => routers.splice(0).forEach((r) => r.close()))

const four = [0, 1, 2, 3].map((k) => ({ id: `i${k}` }))
const prompt = (k: number) => `Document ${k}: ${'some text of its own '.repeat(40)}`

/** Where `n` fresh prompts go, each released at once. */
function spread(r: Router, n: number, from = 0): Map<string, number> {
  const out = new Map<string, number>()
  for (let k = from; k < from + n; k++) {
    const l = r.pick(prompt(k))
    out.set(l.instance, (out.get(l.instance) ?? 0) + 1)
    l.release()
  }
  return out
}

describe('setEngineLoad', () => {
  it('reports what was set, per instance, and refuses unknown ids and bad values', () => {
    const r = make({ instances: four })
    expect(r.setEngineLoad('i1', 5, 120)).toBe(true)
    expect(r.setEngineLoad('nope', 5)).toBe(false)
    const row = r.instances().find((i) => i.id === 'i1')!
    expect(row.engineInFlight).toBe(5)
    expect(row.engineQueuedPrefillBlocks).toBe(120)
    expect(row.inFlight).toBe(0)
    expect(r.instances().find((i) => i.id === 'i0')!.engineInFlight).toBe(0)
    expect(() => r.setEngineLoad('i1', -1)).toThrow(/inFlight/)
    expect(() => r.setEngineLoad('i1', 1.5)).toThrow(/inFlight/)
    expect(() => r.setEngineLoad('i1', 1, Number.NaN)).toThrow(/prefillBlocks/)
    expect(() => r.setEngineLoad(3 as unknown as string, 1)).toThrow(/id/)
  })

  it('starts at zero on an instance that takes over a freed slot', () => {
    const r = make({ instances: four })
    r.setEngineLoad('i3', 9, 9)
    r.setInstances(four.slice(0, 3))
    r.setInstances([...four.slice(0, 3), { id: 'i9' }])
    const row = r.instances().find((i) => i.id === 'i9')!
    expect([row.engineInFlight, row.engineQueuedPrefillBlocks]).toEqual([0, 0])
  })
})

describe('longest_prefix weighs the engines\' load', () => {
  it('keeps new prompts off an instance whose engine is busy with other clients\' requests', () => {
    const r = make({ strategy: 'longest_prefix', instances: four, prefixLength: 65536 })
    const before = spread(r, 200)
    expect(before.get('i2') ?? 0).toBeGreaterThan(0)
    // Busy through another router replica: queued prefill the bound and the cost both see.
    r.setEngineLoad('i2', 40, 100_000)
    const after = spread(r, 200, 1000)
    expect(after.get('i2') ?? 0).toBe(0)
    // Back to this router's own counts: it takes prompts again.
    r.setEngineLoad('i2', 0, 0)
    expect(spread(r, 200, 2000).get('i2') ?? 0).toBeGreaterThan(0)
  })

  it('counts it against the concurrency threshold', () => {
    const r = make({ strategy: 'longest_prefix', instances: four, prefixLength: 65536, concurrencyThreshold: 3 })
    for (const id of ['i0', 'i1', 'i3']) r.setEngineLoad(id, 3)
    const leases = [0, 1, 2].map((k) => r.pick(prompt(k)))
    expect(leases.map((l) => l.instance)).toEqual(['i2', 'i2', 'i2'])
    leases.forEach((l) => l.release())
  })
})

describe('engineLoadAll', () => {
  it('prefix_aware: the threshold counts every client\'s requests only with engineLoadAll', () => {
    const text = prompt(7)
    for (const all of [false, true]) {
      const r = make({ instances: four, concurrencyThreshold: 4, engineLoadAll: all })
      const home = r.pick(text)
      home.release()
      r.setEngineLoad(home.instance, 4)
      const l = r.pick(text)
      expect(l.overflow).toBe(all)
      expect(l.instance === home.instance).toBe(!all)
      l.release()
    }
  })

  it('least_outstanding_requests: the fewest in flight at the instance, from every client', () => {
    const r = make({ strategy: 'least_outstanding_requests', instances: four, engineLoadAll: true })
    for (const id of ['i0', 'i1', 'i2']) r.setEngineLoad(id, 2)
    const seen = [0, 1].map(() => r.pick('x'))
    expect(seen.map((l) => l.instance)).toEqual(['i3', 'i3'])
    // i3 now has 2 of its own: a tie with the others, so the next may go anywhere but i3 has no edge.
    seen.forEach((l) => l.release())
    r.configure({ engineLoadAll: false })
    const counts = spread(r, 400)
    expect(counts.size).toBe(4)
  })

  it('is a routing parameter like the others', () => {
    const r = make({ instances: four })
    expect(r.params.engineLoadAll).toBe(false)
    r.configure({ engineLoadAll: true })
    expect(r.params.engineLoadAll).toBe(true)
    expect(() => r.configure({ engineLoadAll: 'yes' as unknown as boolean })).toThrow(/engineLoadAll/)
  })
})
