// The pd profile over a real Router with role groups: which instances each leg lands on, when
// the prefill leg is skipped, what happens with no prefill (or decode) instance, and that every
// lease taken is counted on the instance doing its leg and released when a leg cannot be had.
import { afterEach, describe, expect, it } from 'vitest'
import { Router } from '../../src/core/router.js'
import { RequestError } from '../../src/core/errors.js'
import { RouterLegPicker, type RoleMember } from '../../src/schedule/router-picker.js'
import { releaseSchedule, schedule, type RequestView } from '../../src/schedule/index.js'
import type { PdOptions } from '../../src/schedule/profiles/pd.js'
import { exactSeed } from '../../src/core/exact-seed.js'

const routers: Router[] = []
afterEach(() => routers.splice(0).forEach((r) => r.close()))

const P = ['http://p0:8000', 'http://p1:8000']
const D = ['http://d0:8000', 'http://d1:8000']

function fleet(members: RoleMember[]): RouterLegPicker {
  const r = new Router({ strategy: 'longest_prefix', instances: [{ id: 'placeholder' }] })
  routers.push(r)
  return new RouterLegPicker(r, members, r.params.blockSize)
}
const pd2x2 = () => fleet([...P.map((id) => ({ id, role: 'prefill' as const })), ...D.map((id) => ({ id, role: 'decode' as const }))])

/** A chat-sized prompt: `tokens` tokens at 4 bytes each. */
function view(text: string): RequestView {
  return { key: text, tenant: undefined, model: undefined, anchor: undefined, exact: undefined, promptTokens: Math.ceil(text.length / 4) }
}
const doc = (i: number, tokens = 2000) => `document ${i}: ${'lorem ipsum dolor sit amet '.repeat(Math.ceil((tokens * 4) / 27))}`.slice(0, tokens * 4)
const DEFAULTS: PdOptions = { order: 'decode-first', threshold: 256, whenNoPrefill: 'decode' }

const inFlight = (p: RouterLegPicker) => Object.fromEntries(p.router.instances().map((i) => [i.id, i.inFlight]))
const queued = (p: RouterLegPicker) => Object.fromEntries(p.router.instances().map((i) => [i.id, i.queuedPrefillBlocks]))

describe('the pd profile', () => {
  it('decode first: a new prompt gets a prefill leg on a prefill instance and a decode leg on a decode instance', () => {
    const p = pd2x2()
    const s = schedule(p, view(doc(1)), DEFAULTS)
    expect(s.profile).toBe('pd')
    if (s.profile !== 'pd') return
    expect(P).toContain(s.prefill.instance)
    expect(D).toContain(s.decode.instance)
    expect(s.uncachedTokens).toBe(2000)
    // Each lease counts on its instance; the decode instance computes none of the prompt.
    expect(inFlight(p)[s.prefill.instance]).toBe(1)
    expect(inFlight(p)[s.decode.instance]).toBe(1)
    expect(queued(p)[s.prefill.instance]).toBeGreaterThan(0)
    expect(queued(p)[s.decode.instance]).toBe(0)
    releaseSchedule(s)
    expect(Object.values(inFlight(p)).every((n) => n === 0)).toBe(true)
  })

  it('skips the prefill leg when the decode instance already holds the prompt', () => {
    const p = pd2x2()
    const first = schedule(p, view(doc(2)), DEFAULTS)
    releaseSchedule(first)
    const again = schedule(p, view(doc(2)), DEFAULTS)
    expect(again.profile).toBe('single')
    if (again.profile !== 'single' || first.profile !== 'pd') return
    expect(again.reason).toBe('short_uncached')
    expect(again.target.instance).toBe(first.decode.instance)
    expect(again.uncachedTokens).toBeLessThan(256)
    // Nothing was taken on a prefill instance.
    for (const id of P) expect(inFlight(p)[id]).toBe(0)
    releaseSchedule(again)
  })

  it('threshold 0 disaggregates every request, a prompt held whole included', () => {
    const p = pd2x2()
    releaseSchedule(schedule(p, view(doc(3)), { ...DEFAULTS, threshold: 0 }))
    const s = schedule(p, view(doc(3)), { ...DEFAULTS, threshold: 0 })
    expect(s.profile).toBe('pd')
    releaseSchedule(s)
  })

  it("a decode instance with the threshold's tokens of other prompts still to compute takes no more: the prefill leg runs elsewhere", () => {
    const p = fleet([
      { id: P[0]!, role: 'prefill' },
      { id: D[0]!, role: 'decode' },
    ])
    // Each 200-token prompt runs whole on the decode instance while what it has queued stays under 256 tokens.
    const a = schedule(p, view(doc(20, 200)), DEFAULTS)
    const b = schedule(p, view(doc(21, 200)), DEFAULTS)
    expect(a).toMatchObject({ profile: 'single', reason: 'short_uncached' })
    expect(b).toMatchObject({ profile: 'single', reason: 'short_uncached' })
    // Their 2 × 12 blocks of 16 tokens wait there: the third, as short, gets a prefill leg.
    const c = schedule(p, view(doc(22, 200)), DEFAULTS)
    expect(c.profile).toBe('pd')
    expect(p.queuedPrefillTokens(D[0]!)).toBe(384)
    if (c.profile === 'pd') expect(c.prefill.instance).toBe(P[0])
    // Once their first tokens are out, the decode instance computes nothing: short prompts stay there again.
    for (const s of [a, b]) if (s.profile === 'single') s.target.lease.firstToken()
    const d = schedule(p, view(doc(23, 200)), DEFAULTS)
    expect(d).toMatchObject({ profile: 'single', reason: 'short_uncached' })
    for (const s of [a, b, c, d]) releaseSchedule(s)
    expect(Object.values(inFlight(p)).every((n) => n === 0)).toBe(true)
  })

  it('a prompt shorter than the threshold runs whole on its decode instance', () => {
    const p = pd2x2()
    const s = schedule(p, view(doc(4, 100)), DEFAULTS)
    expect(s).toMatchObject({ profile: 'single', reason: 'short_uncached', uncachedTokens: 100 })
    releaseSchedule(s)
  })

  it('no prefill instance: decode-only by default, 503 no_prefill_instance with whenNoPrefill fail (no lease left behind)', () => {
    const p = fleet(D.map((id) => ({ id, role: 'decode' as const })))
    const s = schedule(p, view(doc(5)), DEFAULTS)
    expect(s).toMatchObject({ profile: 'single', reason: 'no_prefill_instance' })
    releaseSchedule(s)
    let err: unknown
    try {
      schedule(p, view(doc(55)), { ...DEFAULTS, whenNoPrefill: 'fail' })
    } catch (e) {
      err = e
    }
    expect(err).toBeInstanceOf(RequestError)
    expect((err as RequestError).code).toBe('no_prefill_instance')
    expect((err as RequestError).status).toBe(503)
    expect(Object.values(inFlight(p)).every((n) => n === 0)).toBe(true)
  })

  it('no decode instance: 503 no_decode_instance, for either order', () => {
    const p = fleet(P.map((id) => ({ id, role: 'prefill' as const })))
    for (const order of ['decode-first', 'prefill-first'] as const) {
      expect(() => schedule(p, view(doc(6)), { ...DEFAULTS, order })).toThrow(expect.objectContaining({ code: 'no_decode_instance', status: 503 }))
      expect(Object.values(inFlight(p)).every((n) => n === 0)).toBe(true)
    }
  })

  it('prefill first: the same legs, and the prefill lease given back when the decode instance holds the prompt', () => {
    const p = pd2x2()
    const o: PdOptions = { ...DEFAULTS, order: 'prefill-first' }
    const s = schedule(p, view(doc(7)), o)
    expect(s.profile).toBe('pd')
    releaseSchedule(s)
    const again = schedule(p, view(doc(7)), o)
    expect(again).toMatchObject({ profile: 'single', reason: 'short_uncached' })
    for (const id of P) expect(inFlight(p)[id]).toBe(0)
    releaseSchedule(again)
  })

  it('instances playing both take either leg, and a fleet of only both runs single', () => {
    const both = fleet([{ id: 'http://b0:8000', role: 'both' }, { id: 'http://b1:8000', role: 'both' }])
    const s = schedule(both, view(doc(8)), DEFAULTS)
    expect(s).toMatchObject({ profile: 'single', reason: 'aggregated' })
    releaseSchedule(s)
    const mixed = fleet([{ id: 'http://b0:8000', role: 'both' }, { id: 'http://d0:8000', role: 'decode' }])
    const m = schedule(mixed, view(doc(9)), DEFAULTS)
    expect(m.profile).toBe('pd')
    if (m.profile === 'pd') expect(m.prefill.instance).toBe('http://b0:8000')
    releaseSchedule(m)
  })
})

describe('the pd profile under load (decodePrefillCap)', () => {
  const LOADED: PdOptions = { ...DEFAULTS, decodePrefillCap: 2048 }
  const one = () =>
    fleet([
      { id: P[0]!, role: 'prefill' },
      { id: D[0]!, role: 'decode' },
    ])

  it('runs a prompt past the threshold whole on its decode instance when the prefill instances have more queued', () => {
    const p = one()
    // Three new 4,000-token prompts wait at the only prefill instance.
    const backlog = [30, 31, 32].map((i) => schedule(p, view(doc(i, 4000)), LOADED))
    expect(backlog.map((s) => s.profile)).toEqual(['pd', 'pd', 'pd'])
    // A 1,000-token prompt: past the threshold, but sooner from the idle decode instance.
    const s = schedule(p, view(doc(33, 1000)), LOADED)
    expect(s).toMatchObject({ profile: 'single', reason: 'prefill_busier', uncachedTokens: 1000 })
    expect(p.leastQueuedPrefillTokens('prefill')).toBeGreaterThan(10_000)
    if (s.profile === 'single') expect(s.target.instance).toBe(D[0])
    // The prefill instance took nothing for it.
    expect(inFlight(p)[P[0]!]).toBe(3)
    // Without the cap (the threshold alone), the same prompt is split.
    const off = schedule(p, view(doc(34, 1000)), DEFAULTS)
    expect(off.profile).toBe('pd')
    for (const x of [...backlog, s, off]) releaseSchedule(x)
    expect(Object.values(inFlight(p)).every((n) => n === 0)).toBe(true)
  })

  it('splits when the prefill instance is idle, when the prefill would pass the cap, and when too many requests decode there', () => {
    const p = one()
    // An idle fleet splits as the threshold says.
    const idle = schedule(p, view(doc(45, 1000)), LOADED)
    expect(idle).toMatchObject({ profile: 'pd' })
    // A backlog at the prefill instance...
    const backlog = [46, 47, 48].map((i) => schedule(p, view(doc(i, 4000)), LOADED))
    // ...but a prompt whose prefill alone passes the cap still goes there.
    const long = schedule(p, view(doc(49, 3000)), LOADED)
    expect(long.profile).toBe('pd')
    // The decode instance takes one 1,500-token prompt; the next would pass the cap with it queued.
    const first = schedule(p, view(doc(50, 1500)), LOADED)
    expect(first).toMatchObject({ profile: 'single', reason: 'prefill_busier' })
    const second = schedule(p, view(doc(51, 1500)), LOADED)
    expect(second.profile).toBe('pd')
    if (first.profile === 'single') first.target.lease.firstToken()
    // 40 more requests decoding there (short ones, their first tokens out): a 1,000-token prefill
    // would stall them all for more than the prefill queue saves it.
    const decoding = Array.from({ length: 40 }, (_, i) => schedule(p, view(doc(60 + i, 100)), LOADED))
    for (const s of decoding) if (s.profile === 'single') s.target.lease.firstToken()
    const stalled = schedule(p, view(doc(52, 1000)), LOADED)
    expect(stalled.profile).toBe('pd')
    for (const x of [idle, ...backlog, long, first, second, ...decoding, stalled]) releaseSchedule(x)
    expect(Object.values(inFlight(p)).every((n) => n === 0)).toBe(true)
  })

})

describe('the pd profile with the exact view', () => {
  it("counts a decode instance's blocks still on their way from a prefill leg as lacking, and runs whole there once its engine reports them", () => {
    let now = 0
    const r = new Router({ strategy: 'longest_prefix', instances: [{ id: 'placeholder' }] })
    routers.push(r)
    const p = new RouterLegPicker(r, [{ id: P[0]!, role: 'prefill' }, { id: D[0]!, role: 'decode' }], r.params.blockSize, () => now)
    for (const id of [P[0]!, D[0]!]) r.exact.setView(id, 'fresh')
    const text = doc(7)
    const ids = Uint32Array.from({ length: 2000 }, (_, i) => 1000 + i)
    const v: RequestView = { ...view(text), exact: { ids, seed: exactSeed(undefined, undefined) }, promptTokens: ids.length }
    const first = schedule(p, v, DEFAULTS)
    expect(first.profile).toBe('pd')
    releaseSchedule(first)
    // A second of the same prompt while the first's blocks are pending on the decode instance
    // (routed there, not reported): its engine has none of them, so the prefill leg runs again
    // rather than the decode instance computing all 2,000 tokens itself.
    now = 1000
    const pending = r.exact.instance(D[0]!)!
    expect(pending.pendingBlocks).toBeGreaterThan(0)
    expect(pending.gpuBlocks).toBe(0)
    const second = schedule(p, v, DEFAULTS)
    expect(second.profile).toBe('pd')
    expect(second.uncachedTokens).toBe(2000)
    releaseSchedule(second)
    // The transfer done, the decode instance's engine reports the blocks: now it runs whole there.
    const bs = r.params.exactBlockSize
    const n = Math.floor(ids.length / bs)
    expect(r.exact.store(D[0]!, null, BigUint64Array.from({ length: n }, (_, i) => BigInt(i + 1)), ids.subarray(0, n * bs), bs, exactSeed(undefined, undefined), 0)).toBe(n)
    now = 2000
    const third = schedule(p, v, DEFAULTS)
    expect(third.profile).toBe('single')
    if (third.profile !== 'single') return
    expect(third.reason).toBe('short_uncached')
    expect(third.target.instance).toBe(D[0])
    expect(third.uncachedTokens).toBeLessThan(256)
    releaseSchedule(third)
  })

  it('leaves the approximate match alone on a decode instance whose events it does not follow', () => {
    const r = new Router({ strategy: 'longest_prefix', instances: [{ id: 'placeholder' }] })
    routers.push(r)
    const p = new RouterLegPicker(r, [{ id: P[0]!, role: 'prefill' }, { id: D[0]!, role: 'decode' }], r.params.blockSize, () => 0)
    // Only the prefill instance's events are followed: the decode instance has no exact view.
    r.exact.setView(P[0]!, 'fresh')
    const ids = Uint32Array.from({ length: 2000 }, (_, i) => 5000 + i)
    const v: RequestView = { ...view(doc(8)), exact: { ids, seed: exactSeed(undefined, undefined) }, promptTokens: ids.length }
    releaseSchedule(schedule(p, v, DEFAULTS))
    const again = schedule(p, v, DEFAULTS)
    expect(again.profile).toBe('single')
    if (again.profile !== 'single') return
    expect(again.target.lease.exact).toBe(false)
    expect(again.reason).toBe('short_uncached')
    releaseSchedule(again)
  })
})
