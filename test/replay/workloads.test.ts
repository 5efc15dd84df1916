import { describe, expect, it } from 'vitest'
import { Rng, Zipf } from '../../src/replay/rng.js'
import { tokensOf } from '../../src/replay/text.js'
import { resolveParams, type TimedRequest, type Workload } from '../../src/replay/types.js'
import { WORKLOADS } from '../../src/replay/workloads/index.js'

type Msg = { role: string; content: string }
const msgs = (r: TimedRequest): Msg[] => r.body.messages as Msg[]
const gen = (w: Workload, given: Record<string, number>, durationMs: number, seed = 1): TimedRequest[] => [
  ...w.generate(resolveParams(w, given), { seed, durationMs }),
]

describe('workload generators', () => {
  it('are deterministic for a seed, differ across seeds, and arrive in order within the duration', () => {
    for (const w of Object.values(WORKLOADS)) {
      const small = w.name === 'long-context' ? { 'doc-tokens': 200 } : {}
      const a = gen(w, small, 60_000, 7)
      const b = gen(w, small, 60_000, 7)
      const c = gen(w, small, 60_000, 8)
      expect(a.length, w.name).toBeGreaterThan(10)
      expect(JSON.stringify(a), w.name).toBe(JSON.stringify(b))
      expect(JSON.stringify(a), w.name).not.toBe(JSON.stringify(c))
      for (let i = 1; i < a.length; i++) expect(a[i]!.at).toBeGreaterThanOrEqual(a[i - 1]!.at)
      expect(a.at(-1)!.at).toBeLessThan(60_000)
      expect(a[0]!.at).toBeGreaterThanOrEqual(0)
    }
  })

  it('rejects knobs out of range, naming the flag', () => {
    expect(() => resolveParams(WORKLOADS['long-context']!, { zipf: -1 })).toThrow(/--zipf must be a number from 0 to 4; got -1/)
    expect(() => resolveParams(WORKLOADS['shared-prefix']!, { groups: 1.5 })).toThrow(/--groups must be an integer/)
  })
})

describe('long-context', () => {
  const w = WORKLOADS['long-context']!
  const reqs = gen(w, { rate: 50, documents: 100, zipf: 1, 'doc-tokens': 500, 'question-tokens': 40 }, 200_000)

  it('arrives as a Poisson stream at the rate', () => {
    expect(reqs.length).toBeGreaterThan(10_000 * 0.96)
    expect(reqs.length).toBeLessThan(10_000 * 1.04)
    // Exponential gaps: the coefficient of variation of inter-arrival times is ~1.
    const gaps = reqs.slice(1).map((r, i) => r.at - reqs[i]!.at)
    const mean = gaps.reduce((a, b) => a + b) / gaps.length
    const sd = Math.sqrt(gaps.reduce((a, g) => a + (g - mean) ** 2, 0) / gaps.length)
    expect(mean).toBeCloseTo(20, 0)
    expect(sd / mean).toBeGreaterThan(0.95)
    expect(sd / mean).toBeLessThan(1.05)
  })

  it('draws documents by Zipf popularity and gives each a unique question of the documented length', () => {
    const counts = new Map<string, number>()
    const zipf = new Zipf(100, 1)
    for (const r of reqs) {
      const user = msgs(r)[1]!.content
      const doc = user.slice(0, 2000)
      counts.set(doc, (counts.get(doc) ?? 0) + 1)
      expect(tokensOf(doc)).toBe(500)
      const q = tokensOf(user.slice(2002))
      expect(q).toBeGreaterThanOrEqual(20)
      expect(q).toBeLessThanOrEqual(60)
      expect(r.body.max_tokens).toBe(64)
    }
    const freq = [...counts.values()].sort((a, b) => b - a)
    expect(counts.size).toBe(100)
    // The most popular documents get Zipf's shares (within 10% of the expected count).
    for (let k = 0; k < 5; k++) expect(Math.abs(freq[k]! / reqs.length - zipf.p(k)) / zipf.p(k)).toBeLessThan(0.1)
    const questions = new Set(reqs.map((r) => msgs(r)[1]!.content.slice(2002)))
    expect(questions.size).toBe(reqs.length)
  })
})

describe('conversations', () => {
  const w = WORKLOADS.conversations!
  const reqs = gen(w, { rate: 5, 'think-time': 2, 'system-tokens': 100 }, 1_200_000)

  it('averages ~3.5 turns, each turn resending the whole history', () => {
    const byConv = new Map<number, TimedRequest[]>()
    for (const r of reqs) {
      const first = msgs(r)[1]!.content
      const id = Number(/^User (\d+),/.exec(first)![1])
      byConv.set(id, [...(byConv.get(id) ?? []), r])
    }
    // Conversations starting in the first half have (almost always) finished by the end.
    const finished = [...byConv.entries()].filter(([, turns]) => turns[0]!.at < 600_000).map(([, t]) => t)
    const meanTurns = finished.reduce((a, t) => a + t.length, 0) / finished.length
    expect(meanTurns).toBeGreaterThan(3.2)
    expect(meanTurns).toBeLessThan(3.8)
    for (const turns of finished.slice(0, 200)) {
      for (let k = 1; k < turns.length; k++) {
        const prev = msgs(turns[k - 1]!)
        const cur = msgs(turns[k]!)
        expect(cur.slice(0, prev.length)).toEqual(prev)
        expect(cur[prev.length]!.role).toBe('assistant')
        // The next turn comes after the reply streamed (25 ms per token) plus thinking.
        expect(turns[k]!.at - turns[k - 1]!.at).toBeGreaterThanOrEqual((turns[k - 1]!.body.max_tokens as number) * 25)
      }
    }
  })

  it('shares one system prompt per application', () => {
    const systems = new Set(reqs.map((r) => msgs(r)[0]!.content))
    expect(systems.size).toBeLessThanOrEqual(16)
    expect(systems.size).toBeGreaterThan(8)
    const starts = new Set(reqs.map((r) => msgs(r)[1]!.content)).size
    expect(starts / 1200).toBeGreaterThan(4.5) // ~5 conversations per second
    expect(starts / 1200).toBeLessThan(5.5)
  })
})

describe('shared-prefix', () => {
  it("sends SGLang's 64 × 16 prompts per pass with 2,048 + 128 tokens and 256 output tokens", () => {
    const reqs = gen(WORKLOADS['shared-prefix']!, { rate: 100 }, 11_000)
    expect(reqs.length).toBeGreaterThan(1024)
    const perGroup = new Map<string, number>()
    for (const r of reqs.slice(0, 1024)) {
      const text = msgs(r)[0]!.content
      const system = text.slice(0, 2048 * 4)
      perGroup.set(system, (perGroup.get(system) ?? 0) + 1)
      expect(tokensOf(text)).toBe(2048 + 128)
      expect(r.body.max_tokens).toBe(256)
    }
    expect(perGroup.size).toBe(64)
    expect(new Set(perGroup.values())).toEqual(new Set([16]))
  })
})

describe('tenants', () => {
  it('sends one system prompt with a tenant id per request, tenant sizes by Zipf', () => {
    const reqs = gen(WORKLOADS.tenants!, { rate: 100, tenants: 5, zipf: 1 }, 100_000)
    expect(new Set(reqs.map((r) => msgs(r)[0]!.content)).size).toBe(1)
    const counts = new Map<string, number>()
    for (const r of reqs) counts.set(r.tenant!, (counts.get(r.tenant!) ?? 0) + 1)
    expect([...counts.keys()].sort()).toEqual(['tenant-0', 'tenant-1', 'tenant-2', 'tenant-3', 'tenant-4'])
    const zipf = new Zipf(5, 1)
    for (let k = 0; k < 5; k++) expect(counts.get(`tenant-${k}`)! / reqs.length).toBeCloseTo(zipf.p(k), 1)
  })
})

describe('Rng', () => {
  it('has the moments of its distributions', () => {
    const r = new Rng(3, 'moments')
    const n = 50_000
    let u = 0
    let e = 0
    let g = 0
    for (let i = 0; i < n; i++) {
      u += r.next()
      e += r.exponential(2)
      g += r.geometric(3.5)
    }
    expect(u / n).toBeCloseTo(0.5, 2)
    expect(e / n).toBeCloseTo(2, 1)
    expect(g / n).toBeCloseTo(3.5, 1)
    const ln = Array.from({ length: 20_001 }, () => r.lognormal(80, 0.9)).sort((a, b) => a - b)
    expect(ln[10_000]! / 80).toBeGreaterThan(0.95)
    expect(ln[10_000]! / 80).toBeLessThan(1.05)
  })
})
