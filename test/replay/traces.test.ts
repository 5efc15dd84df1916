import { spawnSync } from 'node:child_process'
import { mkdtempSync, readFileSync, rmSync } from 'node:fs'
import { tmpdir } from 'node:os'
import { join } from 'node:path'
import { fileURLToPath } from 'node:url'
import { afterAll, describe, expect, it } from 'vitest'
import { parseHashIdLine } from '../../src/replay/hash-id-trace.js'
import { SHAPES, traceLine, traceWindow } from '../../src/replay/traces/index.js'
import type { TraceRow } from '../../src/replay/traces/types.js'

const cli = fileURLToPath(new URL('../../dist/cli.js', import.meta.url))
const dir = mkdtempSync(join(tmpdir(), 'pr-make-trace-'))
afterAll(() => rmSync(dir, { recursive: true, force: true }))

const HOUR = 3_600_000
const B = 512

function rows(shape: string, durationMs: number, o: { seed?: number; startMs?: number; params?: Record<string, number>; blockTokens?: number } = {}): TraceRow[] {
  const s = SHAPES[shape]!
  const params: Record<string, number> = {}
  for (const p of s.params) params[p.flag] = o.params?.[p.flag] ?? p.default
  return [...traceWindow(s.generate(params, { seed: o.seed ?? 1, blockTokens: o.blockTokens ?? B }), o.startMs ?? 0, durationMs)]
}

const mean = (xs: number[]): number => xs.reduce((a, b) => a + b, 0) / xs.length

/** Checks what every hash-id trace must satisfy; returns the share of input tokens in blocks seen before. */
function wellFormed(rs: TraceRow[], blockTokens = B): number {
  const seen = new Set<number>()
  const problems: string[] = []
  let prev = 0
  let reused = 0
  let total = 0
  for (const [i, r] of rs.entries()) {
    if (!Number.isInteger(r.at) || r.at < prev) problems.push(`row ${i}: time ${r.at} after ${prev}`)
    prev = r.at
    // Throws unless the line is one replay accepts (id count, lengths).
    parseHashIdLine(traceLine(r), 't', i + 1, blockTokens)
    // A prefix of ids seen before, then only ids never seen: ids name prefixes.
    let j = 0
    while (j < r.hashIds.length && seen.has(r.hashIds[j]!)) j++
    for (let k = j; k < r.hashIds.length; k++) if (seen.has(r.hashIds[k]!)) problems.push(`row ${i}: id ${k} seen before after a new one`)
    for (const id of r.hashIds) seen.add(id)
    reused += Math.min(j * blockTokens, r.inputLength)
    total += r.inputLength
  }
  expect(problems.slice(0, 5)).toEqual([])
  return reused / total
}

describe('make-trace shapes', () => {
  const hour = rows('chat', HOUR)

  it('chat: an hour of Mooncake-conversation-like traffic', () => {
    expect(hour.length).toBeGreaterThan(11_000)
    expect(hour.length).toBeLessThan(13_000)
    const inputs = hour.map((r) => r.inputLength)
    expect(mean(inputs)).toBeGreaterThan(11_000)
    expect(mean(inputs)).toBeLessThan(13_500)
    expect(mean(hour.map((r) => r.outputLength))).toBeGreaterThan(320)
    expect(mean(hour.map((r) => r.outputLength))).toBeLessThan(365)
    // Long-tailed: short turns and very long ones, none past the context.
    expect(inputs.filter((n) => n < 2000).length / inputs.length).toBeGreaterThan(0.04)
    expect(inputs.filter((n) => n > 50_000).length / inputs.length).toBeGreaterThan(0.01)
    expect(Math.max(...hour.map((r) => r.inputLength + r.outputLength))).toBeLessThanOrEqual(131_072)
    expect(hour.filter((r) => r.hashIds[0] !== 0)).toEqual([])
    const reuse = wellFormed(hour)
    expect(reuse).toBeGreaterThan(0.35)
    expect(reuse).toBeLessThan(0.6)
  })

  it('chat: turn k+1 keeps turn k’s full blocks, then new ids, and carries its reply', () => {
    // The last full block's id names the whole prefix: index the rows by it.
    const byLastFull = new Map<string, TraceRow>()
    let continuations = 0
    const seen = new Set<number>()
    for (const r of hour) {
      let j = 0
      while (j < r.hashIds.length && seen.has(r.hashIds[j]!)) j++
      if (j > 1) {
        const prev = byLastFull.get(`${j}:${r.hashIds[j - 1]}`)
        expect(prev, `a turn reusing ${j} blocks continues a turn with ${j} full blocks`).toBeDefined()
        expect(r.inputLength).toBeGreaterThan(prev!.inputLength + prev!.outputLength)
        expect(r.at).toBeGreaterThan(prev!.at)
        continuations++
      }
      for (const id of r.hashIds) seen.add(id)
      const full = Math.floor(r.inputLength / B)
      if (full > 0) byLastFull.set(`${full}:${r.hashIds[full - 1]}`, r)
    }
    expect(continuations / hour.length).toBeGreaterThan(0.3)
  })

  it('a window is a slice of the same service: --start shifts, conversations begun earlier continue', () => {
    const forty = rows('chat', 40 * 60_000)
    const slice = rows('chat', 10 * 60_000, { startMs: 30 * 60_000 })
    const expected = forty.filter((r) => r.at >= 30 * 60_000).map((r) => ({ ...r, at: r.at - 30 * 60_000 }))
    expect(slice).toEqual(expected)
    expect(slice[0]!.at).toBeLessThan(5000)
    // Some of the slice's first requests continue conversations whose earlier turns were before it.
    const before = new Set(forty.filter((r) => r.at < 30 * 60_000).flatMap((r) => r.hashIds.slice(1)))
    expect(slice.slice(0, 200).filter((r) => r.hashIds.length > 1 && before.has(r.hashIds[1]!)).length).toBeGreaterThan(10)
    expect(rows('mixed', 5 * 60_000, { startMs: 10 * 60_000 })).toEqual(
      rows('mixed', 15 * 60_000)
        .filter((r) => r.at >= 10 * 60_000)
        .map((r) => ({ ...r, at: r.at - 10 * 60_000 })),
    )
  })

  it('is deterministic by seed', () => {
    for (const shape of Object.keys(SHAPES)) {
      const a = rows(shape, 5 * 60_000, { seed: 7 }).map(traceLine)
      expect(rows(shape, 5 * 60_000, { seed: 7 }).map(traceLine)).toEqual(a)
      expect(rows(shape, 5 * 60_000, { seed: 8 }).map(traceLine)).not.toEqual(a)
    }
  })

  it('mixed: chats, questions on shared documents, one-offs', () => {
    const rs = rows('mixed', HOUR)
    expect(rs.length).toBeGreaterThan(5 * 3600 * 0.93)
    expect(rs.length).toBeLessThan(5 * 3600 * 1.07)
    wellFormed(rs)
    const m = mean(rs.map((r) => r.inputLength))
    expect(m).toBeGreaterThan(6500)
    expect(m).toBeLessThan(10_000)
    // Questions on a document (8,000 to 30,000 tokens in whole blocks) share all its blocks
    // and differ in a short last block.
    const byFirst = new Map<number, TraceRow[]>()
    for (const r of rs) {
      const g = byFirst.get(r.hashIds[0]!)
      if (g === undefined) byFirst.set(r.hashIds[0]!, [r])
      else g.push(r)
    }
    const documents = [...byFirst.values()].filter(
      (g) => g.length > 1 && g.every((r) => r.inputLength > 8000 && r.hashIds.length === g[0]!.hashIds.length && r.hashIds.at(-2) === g[0]!.hashIds.at(-2)),
    )
    expect(documents.length).toBeLessThanOrEqual(200)
    expect(documents.length).toBeGreaterThan(150)
    const questions = documents.reduce((n, g) => n + g.length, 0)
    expect(questions / rs.length).toBeGreaterThan(0.36)
    expect(questions / rs.length).toBeLessThan(0.44)
    // The chats and one-offs are short: a few hundred to a few thousand tokens.
    const short = rs.filter((r) => r.inputLength < 8000).map((r) => r.inputLength)
    expect(mean(short)).toBeGreaterThan(300)
    expect(mean(short)).toBeLessThan(3000)
    const outputs = rs.map((r) => r.outputLength)
    expect(mean(outputs)).toBeGreaterThan(120)
    expect(mean(outputs)).toBeLessThan(300)
    // Shares move the mixture; block size moves the ids.
    const onlyDocs = rows('mixed', 10 * 60_000, { params: { 'chat-share': 0, 'doc-share': 1 } })
    expect(Math.min(...onlyDocs.map((r) => r.inputLength))).toBeGreaterThan(8000)
    wellFormed(rows('mixed', 10 * 60_000, { blockTokens: 64 }), 64)
    wellFormed(rows('chat', 10 * 60_000, { blockTokens: 64 }), 64)
  })
})

describe('prefix-router make-trace', () => {
  const run = (args: string[]) => spawnSync(process.execPath, [cli, 'make-trace', ...args], { encoding: 'utf8' })

  it('writes a trace that replay reads, to a file or stdout', () => {
    const out = join(dir, 't.jsonl')
    const res = run(['--shape', 'chat', '--duration', '2m', '--out', out])
    expect(res.status).toBe(0)
    expect(res.stderr).toMatch(/^make-trace: chat, 2m from 0s: [\d,]+ requests, mean input [\d,]+ tokens, mean output \d+ → /)
    const text = readFileSync(out, 'utf8')
    expect(text).toBe(rows('chat', 120_000).map((r) => traceLine(r) + '\n').join(''))
    const stdout = run(['--shape', 'chat', '--duration', '2m', '--quiet'])
    expect(stdout.stderr).toBe('')
    expect(stdout.stdout).toBe(text)
    const replay = spawnSync(
      process.execPath,
      [cli, 'replay', '--trace', out, '--trace-format', 'hash-ids', '--profile', 'tiny', '--instances', '2', '--strategies', 'random', '--quiet', '--out', join(dir, 'r')],
      { encoding: 'utf8' },
    )
    expect(replay.stderr).toBe('')
    expect(replay.status).toBe(0)
    expect(replay.stdout).toMatch(/^\| random \| \d+/m)
  })

  it('names the bad value and exits 2', () => {
    const bad = (args: string[], re: RegExp) => {
      const res = run(args)
      expect(res.status, args.join(' ')).toBe(2)
      expect(res.stderr).toMatch(re)
    }
    bad(['--shape', 'agents'], /--shape must be one of chat, mixed; got 'agents'/)
    bad(['--duration', 'soon'], /--duration must be a duration such as 1h, 10m, 90s or 500ms; got 'soon'/)
    bad(['--duration', '0'], /--duration must be a duration/)
    bad(['--start', 'yesterday'], /--start must be a duration .* got 'yesterday'/)
    bad(['--seed', 'x'], /--seed must be an integer from 0 to 2147483647; got 'x'/)
    bad(['--block-tokens', '7'], /--block-tokens must be an integer from 8 to 65536; got '7'/)
    bad(['--rate', '0'], /--rate must be a number from 0\.001 to 10000; got '0'/)
    bad(['--turns', 'many'], /--turns must be a number from 1 to 1000; got 'many'/)
    bad(['--first-tokens', '1.5'], /--first-tokens must be an integer from 1 to 1000000; got '1\.5'/)
    bad(['--documents', '10'], /--documents does not apply to --shape chat/)
    bad(['--shape', 'mixed', '--first-tokens', '10'], /--first-tokens does not apply to --shape mixed/)
    bad(['--shape', 'mixed', '--chat-share', '0.7', '--doc-share', '0.5'], /--chat-share and --doc-share must add up to at most 1 .* got 0\.7 \+ 0\.5/)
    bad(['--shape', 'mixed', '--zipf', '5'], /--zipf must be a number from 0 to 4; got '5'/)
    bad(['--out', join(dir, 'no', 'such', 'dir', 't.jsonl')], /--out cannot write/)
    bad(['--bogus'], /unknown option '--bogus'/)
  })

  it('documents every shape knob in --help', () => {
    const res = run(['--help'])
    expect(res.status).toBe(0)
    for (const s of Object.values(SHAPES)) for (const p of s.params) expect(res.stdout).toContain(`--${p.flag}`)
  })
})
