// `cache-pressure`: llm-d's precise-scheduling benchmark, scaled to the simulator's fleet.
// llm-d ("KV-Cache Wins You Can See", llm-d.ai/blog, 2025) sends 150 groups × 5 users, each
// request a group's 6,000-token prefix and a 1,200-token question, with 1,000-token answers,
// at Poisson rates stepped from 3 to 60 requests/s until the fleet saturates. What makes it a
// test of cache views is the sizing: the prefixes fit the fleet's KV cache only while few
// requests run; as the rate climbs, the running requests' own blocks (question + answer,
// 2,200 tokens each) crowd prefixes out, and a router that believes a prefix is still where
// it sent it last sends requests to recompute it.
//
// Scaled to the default profile: an instance of llama-3.1-70b-p5 caches 1.28 M tokens, so 150
// prefixes (0.9 M tokens) would fit one instance. The default 1,500 groups are 9 M tokens,
// 88% of 8 instances' 10.24 M. The rates are scaled the same way: 1,000-token answers make
// decode the bound (a step of a full batch takes ~90 ms: ~3 requests/s an instance), so the
// steps climb from 3 to 27 requests/s for 8 instances, to saturation. A request is in
// flight for at least its answer's decode steps (1,000 × 22 ms), so at 3 requests/s ~66 run
// at once and their own tokens (0.15 M) leave room for every prefix; at 27 requests/s ~600
// run, their 1.3 M tokens do not. `sizing` prints these numbers for the fleet at hand.
//
//   arrivals  Poisson; step k of `steps` (each `step-seconds` long) at rate-start +
//             k × (rate-end − rate-start) / (steps − 1) requests/s
//   order     passes over every (group, user) pair, each pass shuffled (shared-prefix's way:
//             only the prefixes repeat, never a question)
//   prompt    [user: group prefix (`prefix-tokens`) + question (`question-tokens`)]
//   output    `output-tokens` (max_tokens)
import { Rng } from '../rng.js'
import { prose } from '../text.js'
import type { FleetShape, Phase, TimedRequest, Workload, WorkloadParams } from '../types.js'

export const cachePressure: Workload = {
  name: 'cache-pressure',
  summary: "llm-d's precise-scheduling benchmark: shared 6,000-token group prefixes, 1,200-token questions, 1,000-token answers, Poisson rate in steps",
  params: [
    { flag: 'rate-start', description: 'requests per second of the first step (Poisson)', default: 3, min: 0.001, max: 100_000, integer: false },
    { flag: 'rate-end', description: 'requests per second of the last step', default: 27, min: 0.001, max: 100_000, integer: false },
    { flag: 'steps', description: 'rate steps, evenly spaced from rate-start to rate-end', default: 9, min: 1, max: 1000, integer: true },
    { flag: 'step-seconds', description: 'simulated seconds per rate step', default: 60, min: 1, max: 86_400, integer: false },
    { flag: 'groups', description: 'groups, each with its own shared prefix', default: 1500, min: 1, max: 1_000_000, integer: true },
    { flag: 'users-per-group', description: 'users per group: each pass sends one question per user', default: 5, min: 1, max: 100_000, integer: true },
    { flag: 'prefix-tokens', description: 'tokens per group prefix', default: 6000, min: 1, max: 1_000_000, integer: true },
    { flag: 'question-tokens', description: 'tokens per question', default: 1200, min: 1, max: 1_000_000, integer: true },
    { flag: 'output-tokens', description: 'max_tokens of each request', default: 1000, min: 1, max: 100_000, integer: true },
  ],
  durationMs: (p) => p.steps! * p['step-seconds']! * 1000,
  phases: (p, durationMs) => stepPhases(p).filter((s) => s.startMs < durationMs),
  sizing: (p, fleet) => sizingLines(cachePressureSizing(p, fleet)),
  *generate(p: WorkloadParams, { seed, durationMs }): Iterable<TimedRequest> {
    const arrivals = new Rng(seed, 'cache-pressure/arrivals')
    const order = new Rng(seed, 'cache-pressure/order')
    const questions = new Rng(seed, 'cache-pressure/questions')
    // Prefixes are made on first use, each from its own stream (its text does not depend on
    // when it is first drawn), and kept.
    const prefixes = new Map<number, string>()
    const steps = stepPhases(p)
    const end = Math.min(durationMs, steps.at(-1)!.endMs)
    const groups = p.groups!
    const perPass = groups * p['users-per-group']!
    let pass: number[] = []
    let step = 0
    let at = 0
    for (let i = 0; ; i++) {
      // Poisson within a step; an arrival drawn past the step's end is redrawn from the
      // boundary at the next step's rate (exact, as the process is memoryless).
      for (;;) {
        const s = steps[step]!
        const next = at + arrivals.exponential(1000 / rateOf(p, step))
        if (next < s.endMs || step === steps.length - 1) {
          at = next
          break
        }
        at = s.endMs
        step++
      }
      if (at >= end) return
      if (pass.length === 0) pass = order.shuffle(Array.from({ length: perPass }, (_, k) => k % groups))
      const g = pass.pop()!
      let prefix = prefixes.get(g)
      if (prefix === undefined) {
        prefix = prose(new Rng(seed, `cache-pressure/prefix/${g}`), p['prefix-tokens']!, `Group ${g} shared context. `)
        prefixes.set(g, prefix)
      }
      const question = prose(questions, p['question-tokens']!, `Question ${i}: `)
      yield { at, api: 'chat', body: { messages: [{ role: 'user', content: prefix + question }], max_tokens: p['output-tokens']! } }
    }
  },
}

/** Requests per second of step `k` (0-based). */
export function rateOf(p: WorkloadParams, k: number): number {
  const n = p.steps!
  return n === 1 ? p['rate-start']! : p['rate-start']! + (k * (p['rate-end']! - p['rate-start']!)) / (n - 1)
}

function stepPhases(p: WorkloadParams): Phase[] {
  const ms = p['step-seconds']! * 1000
  return Array.from({ length: p.steps! }, (_, k) => ({ label: `${fmt(rateOf(p, k))} req/s`, startMs: k * ms, endMs: (k + 1) * ms }))
}

export interface CachePressureSizing {
  groups: number
  prefixTokens: number
  /** Every group's prefix once. */
  totalPrefixTokens: number
  fleetKvTokens: number
  lowRate: number
  topRate: number
  /**
   * Requests in flight at the lowest and the top rate, at least (Little's law with each
   * request taking at least its answer's decode steps at the profile's step floor).
   */
  inFlightLow: number
  inFlightTop: number
  /** Their own tokens (question + answer), which share the cache with the prefixes. */
  ownTokensLow: number
  ownTokensTop: number
}

/** The workload's tokens against the fleet's KV cache (in the default `bytes` tokenizer's counts). */
export function cachePressureSizing(p: WorkloadParams, fleet: FleetShape): CachePressureSizing {
  const rates = Array.from({ length: p.steps! }, (_, k) => rateOf(p, k))
  const lowRate = Math.min(...rates)
  const topRate = Math.max(...rates)
  const own = p['question-tokens']! + p['output-tokens']!
  const e2eS = (p['output-tokens']! * fleet.decodeStepMs) / 1000
  const inFlight = (rate: number): number => Math.min(rate * e2eS, fleet.instances * fleet.maxNumSeqs)
  return {
    groups: p.groups!,
    prefixTokens: p['prefix-tokens']!,
    totalPrefixTokens: p.groups! * p['prefix-tokens']!,
    fleetKvTokens: fleet.instances * fleet.kvBlocks * fleet.blockSize,
    lowRate,
    topRate,
    inFlightLow: inFlight(lowRate),
    inFlightTop: inFlight(topRate),
    ownTokensLow: inFlight(lowRate) * own,
    ownTokensTop: inFlight(topRate) * own,
  }
}

function sizingLines(s: CachePressureSizing): string[] {
  const m = (t: number): string => `${(t / 1e6).toFixed(2)} M`
  const share = (t: number): string => `${((100 * t) / s.fleetKvTokens).toFixed(0)}%`
  const fits = (own: number): string => (s.totalPrefixTokens + own <= s.fleetKvTokens ? 'every prefix fits' : 'the cache cannot hold every prefix')
  return [
    `Sizing: ${s.groups.toLocaleString('en-US')} prefixes × ${s.prefixTokens.toLocaleString('en-US')} tokens = ${m(s.totalPrefixTokens)} tokens, ` +
      `${share(s.totalPrefixTokens)} of the fleet's KV cache (${m(s.fleetKvTokens)} tokens). ` +
      `At ${fmt(s.lowRate)} req/s at least ~${Math.round(s.inFlightLow)} requests run, their own tokens ${m(s.ownTokensLow)}: ${fits(s.ownTokensLow)}; ` +
      `at ${fmt(s.topRate)} req/s ~${Math.round(s.inFlightTop)}, ${m(s.ownTokensTop)}: ${fits(s.ownTokensTop)}.`,
  ]
}

function fmt(v: number): string {
  return Number.isInteger(v) ? String(v) : v.toFixed(2).replace(/0+$/, '')
}
