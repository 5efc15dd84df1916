// longest_prefix:events on a lane of its own: the router learns what an engine holds only
// from that engine's KV events, and only once the lane's delay has passed.
import { describe, expect, it } from 'vitest'
import { longestPrefixEvents, type EventsRouter } from '../../src/replay/events-lane.js'
import { Lane } from '../../src/replay/lane.js'
import { prepareRequest, type PreparedRequest } from '../../src/replay/prepare.js'
import { nativeFactory, type RouterFactory } from '../../src/replay/routers.js'
import { Rng } from '../../src/replay/rng.js'
import { prose } from '../../src/replay/text.js'
import { resolveSim } from '../../src/sim/config.js'

const DELAY = 40
const sim = resolveSim({ profile: 'tiny' })

function lane(factory: RouterFactory = longestPrefixEvents): Lane {
  return new Lane(factory, {
    instances: 2,
    engines: 2,
    sim: { profile: 'tiny' },
    prefixLength: 4096,
    concurrencyThreshold: undefined,
    replicas: 1,
    seed: 1,
    durationMs: 60_000,
    events: [],
    windowMs: 60_000,
    kvEventsDelayMs: DELAY,
    engineLoadIntervalMs: 0,
    shareLoadIntervalMs: 0,
    shareLoadDelayMs: 0,
    keepRequests: false,
  })
}

const request = (at: number): PreparedRequest =>
  prepareRequest(
    { at, api: 'chat', body: { messages: [{ role: 'user', content: prose(new Rng(3, 'doc'), 1000) }], max_tokens: 4 } },
    0,
    { model: sim.model, blockSize: sim.engine.blockSize, tokenizer: sim.tokenizer, withTokens: true },
  )

/** Submits the prompt straight to engine `to` (no router involved) and runs to its first token. */
function holdOn(l: Lane, to: number): number {
  let first = -1
  l.fleet.submit(to, { prepared: request(0).prompt, maxTokens: 4 }, { at: 0, onFirstToken: (at) => (first = at) })
  for (let t = 1; first < 0 && t <= 10_000; t++) l.fleet.run(t)
  expect(first).toBeGreaterThan(0)
  return first
}

describe('longest_prefix:events', () => {
  it('routes a prompt to the engine holding it once that engine’s events have arrived, not before the delay', () => {
    // Where the router sends the prompt knowing nothing: the engine that does not get it.
    const blind = lane().router.route(request(0), 0).instance
    const holder = 1 - blind

    const before = lane()
    const first = holdOn(before, holder)
    // The blocks are stored at the step that sampled the first token; their events land DELAY later.
    before.fleet.run(first + DELAY - 1)
    const r1 = before.router as EventsRouter
    expect(r1.view(holder)!.gpuBlocks).toBe(0)
    expect(before.router.route(request(first + DELAY - 1), first + DELAY - 1).instance).toBe(blind)

    const after = lane()
    expect(holdOn(after, holder)).toBe(first)
    after.fleet.run(first + DELAY)
    const r2 = after.router as EventsRouter
    expect(r2.view(holder)!.gpuBlocks).toBe(Math.floor(request(0).prompt.blockKeys.length))
    expect(after.router.route(request(first + DELAY), first + DELAY).instance).toBe(holder)
    expect(r2.refused).toEqual({ malformed: 0, orphan: 0, notMember: 0, blockSize: 0, capacity: 0 })

    // The approximate lane never sees the engine's contents: it keeps its blind choice.
    const approx = lane(nativeFactory('longest_prefix'))
    holdOn(approx, holder)
    approx.fleet.run(first + DELAY)
    expect(approx.router.route(request(first + DELAY), first + DELAY).instance).toBe(blind)
    for (const l of [before, after, approx]) {
      l.drain()
      l.close()
    }
  })

  it('drops malformed and orphan events without stopping, and follows an instance that joins', () => {
    const l = lane()
    const r = l.router as EventsRouter
    const stored = { type: 'BlockStored' as const, blockHashes: [1n], tokenIds: [1, 2, 3], blockSize: 16, loraId: null, medium: 'GPU', loraName: null, extraKeys: null, groupIdx: null }
    r.kvEvents(0, [{ ...stored, parentBlockHash: null }, { ...stored, tokenIds: Array.from({ length: 16 }, (_, i) => i), parentBlockHash: 99n }])
    expect(r.refused).toMatchObject({ malformed: 1, orphan: 1 })
    expect(r.view(0)!.gpuBlocks).toBe(0)
    // One instance leaves, then comes back: it starts with no blocks and a fresh view again.
    r.setInstances([0])
    r.setInstances([0, 1])
    expect(r.view(1)).toMatchObject({ view: 'fresh', gpuBlocks: 0 })
    l.close()
  })
})
