import { spawnSync } from 'node:child_process'
import { mkdtempSync, readFileSync, rmSync } from 'node:fs'
import { tmpdir } from 'node:os'
import { join } from 'node:path'
import { fileURLToPath } from 'node:url'
import { afterAll, describe, expect, it } from 'vitest'
import type { ReplayResult, StrategyResult } from '../../src/replay/result.js'
import type { ReplayOptions } from '../../src/replay/options.js'
import { runReplay } from '../../src/replay/run.js'
import { resolveStrategies } from '../../src/replay/strategies.js'
import { resolveParams } from '../../src/replay/types.js'
import { WORKLOADS } from '../../src/replay/workloads/index.js'
import { STRATEGIES } from '../../src/core/options.js'

const cli = fileURLToPath(new URL('../../dist/cli.js', import.meta.url))
const dir = mkdtempSync(join(tmpdir(), 'pr-replay-'))
afterAll(() => rmSync(dir, { recursive: true, force: true }))

// A small long-context: 400 documents of 1,000 tokens over 4 tiny instances. An instance
// caches ~130 documents, the fleet all of them, so random hits ~30% and a prefix router
// most of the time.
const KNOBS = { rate: 40, documents: 400, 'doc-tokens': 1000, 'question-tokens': 32, 'output-tokens': 16 }
const CLI_KNOBS = Object.entries(KNOBS).flatMap(([k, v]) => [`--${k}`, String(v)])

function options(o: Partial<Omit<ReplayOptions, 'strategies'>> & { durationMs: number; strategies: string[] }): ReplayOptions {
  const w = WORKLOADS['long-context']!
  const params = resolveParams(w, KNOBS)
  return {
    requests: w.generate(params, { seed: 1, durationMs: o.durationMs }),
    source: { workload: w.name, params },
    instances: 4,
    sim: { profile: 'tiny' },
    prefixLength: 4096,
    concurrencyThreshold: 10,
    routerReplicas: 1,
    seed: 1,
    events: [],
    ...o,
    strategies: resolveStrategies(o.strategies),
  }
}

const byName = (r: ReplayResult, name: string): StrategyResult => r.strategies.find((s) => s.strategy === name)!

describe('prefix-router replay', () => {
  it('prints the table and writes the JSON and one chart line per strategy', () => {
    const out = join(dir, 'cli')
    const res = spawnSync(process.execPath, [cli, 'replay', '--profile', 'tiny', '--instances', '4', '--duration', '90s', ...CLI_KNOBS, '--out', out, '--quiet'], {
      encoding: 'utf8',
    })
    expect(res.stderr).toBe('')
    expect(res.status).toBe(0)
    const names = [...STRATEGIES, 'longest_prefix:hash', 'sglang_cache_aware', 'llmd_default', 'stack_prefixaware']
    for (const n of names) expect(res.stdout).toMatch(new RegExp(`^\\| ${n} \\| \\d+`, 'm'))
    expect(res.stdout).toMatch(/^long-context \(rate 40, documents 400, .*\): 4 × tiny, 1m30s simulated/)
    const json = JSON.parse(readFileSync(join(out, 'replay.json'), 'utf8'))
    expect(json.command).toMatch(/^prefix-router replay --profile tiny/)
    expect(json.strategies.map((s: { strategy: string }) => s.strategy)).toEqual(names)
    for (const s of json.strategies) {
      expect(s.ttftMs.p50).toBeGreaterThan(0)
      expect(s.ttftMs.p99).toBeGreaterThanOrEqual(s.ttftMs.p90)
      expect(Object.keys(s.instanceShares)).toEqual(['sim-0', 'sim-1', 'sim-2', 'sim-3'])
    }
    const cdf = readFileSync(join(out, 'ttft-cdf.svg'), 'utf8')
    expect(cdf.startsWith('<svg')).toBe(true)
    expect(cdf.trimEnd().endsWith('</svg>')).toBe(true)
    // Vega draws each series of a line mark as its own group holding one path.
    const series = cdf.split('class="mark-line role-mark').slice(1)
    expect(series).toHaveLength(names.length)
    for (const [i, g] of series.entries()) expect(g).toMatch(new RegExp(`^[^>]*><path [^>]*strategy: ${names[i]}"`))
    for (const f of ['instance-shares.svg', 'hit-rate.svg']) expect(readFileSync(join(out, f), 'utf8')).toMatch(/^<svg[^>]*>[\s\S]*<\/svg>\s*$/)
  })

  it('gives prefix_aware a clearly higher hit rate than random, and TTFTs to match', async () => {
    const r = await runReplay(options({ durationMs: 150_000, strategies: ['random', 'prefix_aware'] }))
    const random = byName(r, 'random')
    const prefix = byName(r, 'prefix_aware')
    expect(random.hitRate).toBeLessThan(0.45)
    expect(prefix.hitRate).toBeGreaterThan(random.hitRate + 0.3)
    expect(prefix.ttftMs.p50).toBeLessThan(random.ttftMs.p50)
    expect(prefix.ofIdeal).toBeGreaterThan(0.85)
    expect(r.ideal.hitRate).toBeGreaterThanOrEqual(prefix.hitRate - 0.01)
    expect(random.overflowRate).toBe(0)
    // Both lanes saw the same requests.
    expect(random.requests).toBe(prefix.requests)
    expect(random.requests).toBe(r.requests)
  })

  it('reports the share of traffic a scale event moved and the hit rate recovery', async () => {
    const r = await runReplay(
      options({
        durationMs: 180_000,
        strategies: ['random', 'prefix_aware', 'sglang_cache_aware'],
        events: [
          { atMs: 60_000, kind: 'add' },
          { atMs: 120_000, kind: 'remove' },
        ],
        windowMs: 20_000,
      }),
    )
    const prefix = byName(r, 'prefix_aware')
    const [add, remove] = prefix.events
    // Consistent hashing: going from 4 to 5 instances moves about 1/5 of the keys.
    expect(add!.kind).toBe('add')
    expect(add!.moved - add!.churn).toBeGreaterThan(0.1)
    expect(add!.moved - add!.churn).toBeLessThan(0.35)
    expect(remove!.moved - remove!.churn).toBeGreaterThan(0.05)
    expect(add!.recoveryMs === null || add!.recoveryMs >= 0).toBe(true)
    expect(Object.keys(prefix.instanceShares)).toEqual(['sim-0', 'sim-1', 'sim-2', 'sim-3', 'sim-4'])
    expect(prefix.instanceShares['sim-4']).toBeGreaterThan(0.05)
    // Random moves most keys with or without an event.
    const random = byName(r, 'random').events[0]!
    expect(random.churn).toBeGreaterThan(0.6)
    // SGLang's tree keeps known prefixes where they are; only new ones go to the newcomer.
    expect(byName(r, 'sglang_cache_aware').events[0]!.moved).toBeLessThan(add!.moved)
  })

  it('runs K independent routers per strategy with --router-replicas', async () => {
    const one = await runReplay(options({ durationMs: 60_000, strategies: ['prefix_aware', 'llmd_default'] }))
    const three = await runReplay(options({ durationMs: 60_000, strategies: ['prefix_aware', 'llmd_default'], routerReplicas: 3 }))
    expect(three.routerReplicas).toBe(3)
    // Replicas of prefix_aware hash alike: the same placement, up to their separate overflow counters.
    expect(Math.abs(byName(three, 'prefix_aware').hitRate - byName(one, 'prefix_aware').hitRate)).toBeLessThan(0.03)
    expect(byName(three, 'llmd_default').requests).toBe(byName(one, 'llmd_default').requests)
  })

  it('closed loop: each lane sends as fast as its own answers come back, so a faster strategy sends more', async () => {
    const w = WORKLOADS['long-context']!
    const params = resolveParams(w, KNOBS)
    const r = await runReplay(
      options({
        durationMs: 120_000,
        strategies: ['random', 'prefix_aware'],
        clients: 8,
        // A generator that runs on past the duration: lanes draw what they need.
        requests: w.generate(params, { seed: 1, durationMs: 120_000_000 }),
      }),
    )
    expect(r.clients).toBe(8)
    const random = byName(r, 'random')
    const prefix = byName(r, 'prefix_aware')
    // More hits, shorter prefills, more requests through the same 8 clients.
    expect(prefix.hitRate).toBeGreaterThan(random.hitRate + 0.2)
    expect(prefix.throughput.requestsPerSec).toBeGreaterThan(random.throughput.requestsPerSec * 1.05)
    expect(prefix.requests).toBeGreaterThan(random.requests)
    expect(r.requests).toBe(prefix.requests) // the most any lane drew
  })

  it('closed loop refuses an asynchronous source and scale events', async () => {
    await expect(runReplay(options({ durationMs: 10_000, strategies: ['random'], clients: 2, events: [{ atMs: 5_000, kind: 'add' }] }))).rejects.toThrow(
      /closed-loop replay does not take scale events/,
    )
    const asyncRequests = (async function* () {})()
    await expect(runReplay(options({ durationMs: 10_000, strategies: ['random'], clients: 2, requests: asyncRequests }))).rejects.toThrow(/needs a synchronous Iterable/)
  })
})

describe('prefix-router replay flags', () => {
  const bad = (args: string[], re: RegExp) => {
    const res = spawnSync(process.execPath, [cli, 'replay', '--quiet', ...args], { encoding: 'utf8' })
    expect(res.status, args.join(' ')).toBe(2)
    expect(res.stderr).toMatch(re)
  }

  it('names the bad flag and exits 2', () => {
    bad(['--instances', '0'], /--instances must be an integer from 1 to 256; got '0'/)
    bad(['--duration', 'soon'], /--duration must be a duration such as 1h, 30m, 90s or 500ms; got 'soon'/)
    bad(['--strategies', 'random,fastest'], /--strategies: unknown strategy 'fastest'/)
    bad(['--workload', 'chess'], /--workload must be one of long-context, conversations, shared-prefix, tenants, cache-pressure; got 'chess'/)
    bad(['--workload', 'conversations', '--documents', '10'], /--documents does not apply to --workload conversations/)
    bad(['--zipf', '9'], /--zipf must be a number from 0 to 4; got '9'/)
    bad(['--prefix-length', '10'], /--prefix-length must be an integer from 1024 to 65536/)
    bad(['--concurrency-threshold', '0'], /--concurrency-threshold must be an integer from 1 to 1024/)
    bad(['--router-replicas', '65'], /--router-replicas must be an integer from 1 to 64/)
    bad(['--duration', '10m', '--add-instance-at', '20m'], /--add-instance-at 20m is not within --duration 10m/)
    bad(['--instances', '1', '--remove-instance-at', '1m'], /would leave no instance/)
    bad(['--workload', 'tenants', '--trace', 'x.jsonl'], /give --workload or --trace, not both/)
    bad(['--profile', 'gpt-9'], /--profile must be one of/)
    bad(['--bogus'], /unknown option '--bogus'/)
    bad(['--clients', '0'], /--clients must be an integer from 1 to 100000; got '0'/)
    bad(['--trace-format', 'csv', '--trace', 'x.jsonl'], /--trace-format must be openai or hash-ids; got 'csv'/)
    bad(['--trace-format', 'hash-ids'], /--trace-format needs --trace/)
    bad(['--trace', 'x.jsonl', '--trace-block-tokens', '512'], /--trace-block-tokens applies to --trace-format hash-ids only/)
    bad(['--trace', 'x.jsonl', '--trace-format', 'hash-ids', '--trace-block-tokens', '4'], /--trace-block-tokens must be an integer from 8 to 65536; got '4'/)
    bad(['--clients', '4', '--add-instance-at', '1m'], /--clients cannot be combined with --add-instance-at or --remove-instance-at/)
    bad(['--kv-events-delay', 'later'], /--kv-events-delay must be a duration such as 1h, 30m, 90s or 500ms; got 'later'/)
    bad(['--workload', 'cache-pressure', '--steps', '0'], /--steps must be an integer from 1 to 1000; got '0'/)
  })

  it('documents every workload knob in --help', () => {
    const res = spawnSync(process.execPath, [cli, 'replay', '--help'], { encoding: 'utf8' })
    expect(res.status).toBe(0)
    for (const w of Object.values(WORKLOADS)) for (const p of w.params) expect(res.stdout).toContain(`--${p.flag}`)
  })
})
