// The cache-pressure workload: its sizing against the default fleet, its rate steps and its
// prompts, and the replay command's per-step tables.
import { spawnSync } from 'node:child_process'
import { mkdtempSync, readFileSync, rmSync } from 'node:fs'
import { tmpdir } from 'node:os'
import { join } from 'node:path'
import { fileURLToPath } from 'node:url'
import { afterAll, describe, expect, it } from 'vitest'
import type { ReplayResult } from '../../src/replay/result.js'
import { resolveParams, type TimedRequest } from '../../src/replay/types.js'
import { cachePressure, cachePressureSizing, rateOf } from '../../src/replay/workloads/cache-pressure.js'
import { resolveSim } from '../../src/sim/config.js'

const cli = fileURLToPath(new URL('../../dist/cli.js', import.meta.url))
const dir = mkdtempSync(join(tmpdir(), 'pr-cache-pressure-'))
afterAll(() => rmSync(dir, { recursive: true, force: true }))
const content = (r: TimedRequest): string => (r.body.messages as { content: string }[])[0]!.content

describe('cache-pressure sizing', () => {
  it('at the defaults, 8 default instances hold every prefix at the lowest rate and not at the top one', () => {
    const sim = resolveSim({})
    const fleet = { instances: 8, kvBlocks: sim.engine.kvBlocks, blockSize: sim.engine.blockSize, maxNumSeqs: sim.engine.maxNumSeqs, decodeStepMs: sim.profile.latency.stepBaseMs }
    const s = cachePressureSizing(resolveParams(cachePressure), fleet)
    expect(s.fleetKvTokens).toBe(8 * 80_000 * 16)
    expect(s.totalPrefixTokens).toBe(1500 * 6000)
    expect(s.totalPrefixTokens + s.ownTokensLow).toBeLessThanOrEqual(s.fleetKvTokens)
    expect(s.totalPrefixTokens + s.ownTokensTop).toBeGreaterThan(s.fleetKvTokens)
    // Little's law with the decode floor: 27 req/s × 1,000 steps × 22 ms.
    expect(s.inFlightTop).toBeCloseTo(27 * 22, 6)
    expect(s.ownTokensTop).toBeCloseTo(27 * 22 * 2200, 0)
    expect(cachePressure.sizing!(resolveParams(cachePressure), fleet).join(' ')).toMatch(
      /9\.00 M tokens, 88% of the fleet's KV cache \(10\.24 M tokens\).*every prefix fits.*the cache cannot hold every prefix/,
    )
    // A fleet twice as large holds them even at the top rate.
    const big = cachePressureSizing(resolveParams(cachePressure), { ...fleet, instances: 16 })
    expect(big.totalPrefixTokens + big.ownTokensTop).toBeLessThanOrEqual(big.fleetKvTokens)
  })
})

describe('cache-pressure requests', () => {
  const p = resolveParams(cachePressure, { 'rate-start': 2, 'rate-end': 10, steps: 3, 'step-seconds': 100, groups: 7, 'users-per-group': 3, 'prefix-tokens': 40, 'question-tokens': 8 })
  const reqs = [...cachePressure.generate(p, { seed: 5, durationMs: cachePressure.durationMs!(p) })]

  it('steps the Poisson rate and reports one phase per step', () => {
    expect(cachePressure.durationMs!(p)).toBe(300_000)
    expect([rateOf(p, 0), rateOf(p, 1), rateOf(p, 2)]).toEqual([2, 6, 10])
    const phases = cachePressure.phases!(p, 300_000)
    expect(phases.map((ph) => [ph.label, ph.startMs, ph.endMs])).toEqual([
      ['2 req/s', 0, 100_000],
      ['6 req/s', 100_000, 200_000],
      ['10 req/s', 200_000, 300_000],
    ])
    // A shorter run reports only the steps it reaches.
    expect(cachePressure.phases!(p, 150_000).length).toBe(2)
    phases.forEach((ph, k) => {
      const n = reqs.filter((r) => r.at >= ph.startMs && r.at < ph.endMs).length
      const expected = rateOf(p, k) * 100
      expect(Math.abs(n - expected), `step ${k}: ${n} arrivals`).toBeLessThan(4 * Math.sqrt(expected))
    })
    expect(reqs.at(-1)!.at).toBeLessThan(300_000)
  })

  it('sends each group’s prefix and a fresh question, every (group, user) once a pass', () => {
    const prefixOf = new Map<number, string>()
    for (const r of reqs) {
      const text = content(r)
      const g = Number(/^Group (\d+) shared context\./.exec(text)![1])
      const prefix = text.slice(0, 40 * 4)
      if (prefixOf.has(g)) expect(prefixOf.get(g)).toBe(prefix)
      else prefixOf.set(g, prefix)
      expect(text.length).toBe((40 + 8) * 4)
      expect(r.body.max_tokens).toBe(1000)
    }
    expect([...prefixOf.keys()].sort((a, b) => a - b)).toEqual([0, 1, 2, 3, 4, 5, 6])
    const pass = reqs.slice(0, 21).map((r) => Number(/^Group (\d+)/.exec(content(r))![1]))
    for (let g = 0; g < 7; g++) expect(pass.filter((x) => x === g).length).toBe(3)
    expect(new Set(reqs.map((r) => content(r).slice(160))).size).toBe(reqs.length)
  })
})

describe('prefix-router replay --workload cache-pressure', () => {
  it('takes the event-fed strategies and prints the sizing and one table per rate step', () => {
    const out = join(dir, 'run')
    const args = [
      ...['--workload', 'cache-pressure', '--profile', 'tiny', '--instances', '2', '--out', out, '--quiet'],
      ...['--strategies', 'longest_prefix,longest_prefix:events,llmd_precise,dynamo_kv', '--kv-events-delay', '10ms'],
      ...['--rate-start', '4', '--rate-end', '8', '--steps', '2', '--step-seconds', '5', '--groups', '6'],
      ...['--prefix-tokens', '400', '--question-tokens', '40', '--output-tokens', '16'],
    ]
    const res = spawnSync(process.execPath, [cli, 'replay', ...args], { encoding: 'utf8' })
    expect(res.status, res.stderr).toBe(0)
    expect(res.stdout).toMatch(/^Sizing: 6 prefixes × 400 tokens = 0\.00 M tokens/m)
    expect(res.stdout).toContain("longest_prefix:events, llmd_precise, dynamo_kv: fed by the engines' KV events, 10 ms of simulated time after each engine step.")
    for (const step of ['Step 1: 4 req/s, arrivals 0ms–5s:', 'Step 2: 8 req/s, arrivals 5s–10s:']) {
      const at = res.stdout.indexOf(step)
      expect(at, step).toBeGreaterThan(0)
      const table = res.stdout.slice(at).split('\n\n')[1]!.trimEnd()
      expect(table.split('\n')[0]).toBe('| strategy | P50 TTFT ms | P90 TTFT ms | hit rate | output tok/s | completed |')
      expect(table.split('\n').slice(2).map((l) => l.split(' | ')[0])).toEqual(['| longest_prefix', '| longest_prefix:events', '| llmd_precise', '| dynamo_kv'])
    }
    const json = JSON.parse(readFileSync(join(out, 'replay.json'), 'utf8')) as ReplayResult
    expect(json.durationMs).toBe(10_000)
    expect(json.kvEventsDelayMs).toBe(10)
    expect(json.strategies.map((s) => [s.strategy, s.kvEvents, s.phases?.length])).toEqual([
      ['longest_prefix', false, 2],
      ['longest_prefix:events', true, 2],
      ['llmd_precise', true, 2],
      ['dynamo_kv', true, 2],
    ])
    // Every request that arrived in a step is in that step's table.
    for (const s of json.strategies) expect(s.phases!.reduce((n, ph) => n + ph.arrived, 0)).toBe(s.requests)
    for (const s of json.strategies) expect(s.hitRate, s.strategy).toBeLessThanOrEqual(json.ideal.hitRate + 1e-9)
    // The peers route by the events: with them delayed past the run's end, their hit rates fall.
    const late = join(dir, 'late')
    const lateArgs = args.map((a) => (a === '10ms' ? '1h' : a === out ? late : a))
    expect(spawnSync(process.execPath, [cli, 'replay', ...lateArgs], { encoding: 'utf8' }).status).toBe(0)
    const blind = JSON.parse(readFileSync(join(late, 'replay.json'), 'utf8')) as ReplayResult
    for (const peer of ['llmd_precise', 'dynamo_kv']) {
      const hit = (r: ReplayResult): number => r.strategies.find((s) => s.strategy === peer)!.hitRate
      expect(hit(json), peer).toBeGreaterThan(hit(blind) + 0.03)
    }
  })
})
