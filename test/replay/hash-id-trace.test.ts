import { spawnSync } from 'node:child_process'
import { mkdtempSync, readFileSync, rmSync, writeFileSync } from 'node:fs'
import { tmpdir } from 'node:os'
import { join } from 'node:path'
import { fileURLToPath } from 'node:url'
import { encode } from 'gpt-tokenizer/encoding/o200k_base'
import { afterAll, describe, expect, it } from 'vitest'
import { blockText, BYTES_PER_TOKEN } from '../../src/replay/block-text.js'
import { parseHashIdLine } from '../../src/replay/hash-id-trace.js'
import { runReplay } from '../../src/replay/run.js'
import { resolveStrategies } from '../../src/replay/strategies.js'
import { checkTrace, readTrace, TraceError, type TraceFormat } from '../../src/replay/trace.js'
import { chat } from '../../src/replay/traces/chat.js'
import { traceLine, traceWindow } from '../../src/replay/traces/index.js'
import { getTokenizer, TOKENIZERS } from '../../src/sim/tokenizers/index.js'

const dir = mkdtempSync(join(tmpdir(), 'pr-hash-ids-'))
afterAll(() => rmSync(dir, { recursive: true, force: true }))
const cli = fileURLToPath(new URL('../../dist/cli.js', import.meta.url))
const HASH_IDS: TraceFormat = { kind: 'hash-ids', blockTokens: 512, tokenizer: 'bytes' }
const O200K: TraceFormat = { ...HASH_IDS, tokenizer: 'o200k' }

function file(name: string, lines: unknown[]): string {
  const p = join(dir, name)
  writeFileSync(p, lines.map((l) => (typeof l === 'string' ? l : JSON.stringify(l))).join('\n') + '\n')
  return p
}

const line = (timestamp: number, input: number, output: number, ids: number[]) => ({ timestamp, input_length: input, output_length: output, hash_ids: ids })

describe('hash-id traces', () => {
  it('replays each line as a completions prompt of exactly input_length tokens built from its ids', () => {
    const p = file('ok.jsonl', [
      line(1000, 6755, 500, [0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13]),
      '',
      line(1000, 7319, 490, [0, 14, 15, 16, 17, 18, 19, 20, 21, 22, 23, 24, 25, 26, 27]),
      { ...line(4052, 2287, 316, [0, 42, 43, 44, 45]), session: 'ignored' },
    ])
    for (const format of [HASH_IDS, O200K]) {
      const reqs = [...readTrace(p, format)]
      expect(reqs.map((r) => r.at)).toEqual([0, 0, 3052])
      expect(reqs.map((r) => r.api)).toEqual(['completions', 'completions', 'completions'])
      expect(reqs.map((r) => r.body.max_tokens)).toEqual([500, 490, 316])
      expect(Object.keys(reqs[0]!.body).sort()).toEqual(['max_tokens', 'prompt'])
      const prompts = reqs.map((r) => r.body.prompt as string)
      for (const [i, input] of [6755, 7319, 2287].entries()) {
        if (format === HASH_IDS) expect(prompts[i]).toHaveLength(input * BYTES_PER_TOKEN)
        else expect(encode(prompts[i]!)).toHaveLength(input)
      }
      // Shared exactly as far as the ids agree: block 0, then nothing.
      const b0 = blockText(0, 512, format.kind === 'hash-ids' ? format.tokenizer : 'bytes')
      for (const pr of prompts) expect(pr.startsWith(b0)).toBe(true)
      expect(prompts[0]!.slice(b0.length, b0.length + 64)).not.toBe(prompts[1]!.slice(b0.length, b0.length + 64))
    }
  })

  it('gives the simulator exactly input_length prompt tokens under both of its tokenizers', () => {
    const params = Object.fromEntries(chat.params.map((p) => [p.flag, p.default]))
    const rows = [...traceWindow(chat.generate(params, { seed: 3, blockTokens: 512 }), 0, 60_000)].slice(0, 12)
    const p = file('tokenizers.jsonl', rows.map(traceLine))
    for (const name of TOKENIZERS) {
      const reqs = [...readTrace(p, { ...HASH_IDS, tokenizer: name })]
      expect(reqs).toHaveLength(rows.length)
      for (const [i, r] of reqs.entries()) {
        const prompt = r.body.prompt as string
        expect(getTokenizer(name).prepareText(prompt, 16, 0n).promptTokens, `${name} row ${i}`).toBe(rows[i]!.inputLength)
        if (name === 'o200k') expect(encode(prompt), `row ${i}`).toHaveLength(rows[i]!.inputLength)
      }
    }
  })

  it('checks the whole file and counts what it will replay', async () => {
    const p = file('check.jsonl', [line(5, 10, 1, [7]), line(5, 1024, 2, [7, 8]), line(905, 1025, 3, [7, 8, 9])])
    expect(await checkTrace(p, HASH_IDS)).toEqual({ requests: 3, spanMs: 900 })
    expect(await checkTrace(p, { ...HASH_IDS, blockTokens: 1024 }).catch((e: Error) => e.message)).toMatch(
      /check\.jsonl line 2: "hash_ids" has 2 id\(s\) but input_length 1024 in blocks of 1024 tokens needs 1/,
    )
  })

  it('names the file and line of what cannot be replayed', async () => {
    const cases: [unknown, RegExp][] = [
      ['{not json', /not valid JSON/],
      [[1, 2], /each line must be a JSON object with "timestamp"/],
      [{ input_length: 1, output_length: 1, hash_ids: [0] }, /"timestamp" must be a number of milliseconds; got undefined/],
      [{ ...line(0, 1, 1, [0]), timestamp: '2025-01-01' }, /"timestamp" must be a number/],
      [{ ...line(0, 1, 1, [0]), input_length: undefined }, /"input_length" must be a whole number of tokens, at least 1; got undefined/],
      [line(0, 0, 1, []), /"input_length" must be a whole number of tokens, at least 1; got 0/],
      [line(0, 1.5, 1, [0]), /"input_length" must be .* got 1\.5/],
      [line(0, 10, -3, [0]), /"output_length" must be a whole number of tokens, at least 1; got -3/],
      [line(0, 10, 0, [0]), /"output_length" .* got 0/],
      [{ ...line(0, 10, 1, [0]), output_length: '5' }, /"output_length" .* got "5"/],
      [{ ...line(0, 10, 1, [0]), hash_ids: 'abc' }, /"hash_ids" must be an array of block ids; got "abc"/],
      [line(0, 10, 1, [-1]), /"hash_ids"\[0\] must be a non-negative integer .* got -1/],
      [line(0, 600, 1, [0, 1.5]), /"hash_ids"\[1\] .* got 1\.5/],
      [line(0, 10, 1, [2 ** 53]), /"hash_ids"\[0\] .* got 9007199254740992/],
      [{ ...line(0, 600, 1, []), hash_ids: [0, '1'] }, /"hash_ids"\[1\] .* got "1"/],
      [line(0, 600, 1, [0]), /"hash_ids" has 1 id\(s\) but input_length 600 in blocks of 512 tokens needs 2/],
      [line(0, 100, 1, [0, 1]), /"hash_ids" has 2 id\(s\) but input_length 100 in blocks of 512 tokens needs 1/],
      [line(0, 2 ** 24 + 1, 1, []), /over the 16777216 tokens/],
    ]
    for (const [l, re] of cases) {
      const text = typeof l === 'string' ? l : JSON.stringify(l)
      expect(() => parseHashIdLine(text, 't.jsonl', 4, 512), text).toThrow(TraceError)
      expect(() => parseHashIdLine(text, 't.jsonl', 4, 512), text).toThrow(/^t\.jsonl line 4: /)
      expect(() => parseHashIdLine(text, 't.jsonl', 4, 512), text).toThrow(re)
    }
    const back = file('back.jsonl', [line(100, 10, 1, [0]), line(100, 10, 1, [0]), line(99, 10, 1, [0])])
    await expect(checkTrace(back, HASH_IDS)).rejects.toThrow(/back\.jsonl line 3: timestamps must not decrease/)
    expect(() => [...readTrace(back, HASH_IDS)]).toThrow(/back\.jsonl line 3/)
    await expect(checkTrace(file('blank.jsonl', ['']), HASH_IDS)).rejects.toThrow(/has no requests/)
  })

  it('feeds a closed loop: clients draw the trace in order and stop when it runs out', async () => {
    const lines = Array.from({ length: 30 }, (_, i) => line(i * 60_000, 1200, 8, [0, 100 + i, 200 + i]))
    const p = file('closed.jsonl', lines)
    for (const tokenizer of TOKENIZERS) {
      const r = await runReplay({
        requests: readTrace(p, { ...HASH_IDS, tokenizer }),
        source: { trace: p },
        strategies: resolveStrategies(['random', 'prefix_aware']),
        instances: 2,
        durationMs: 60_000,
        sim: { profile: 'tiny', tokenizer },
        prefixLength: 4096,
        concurrencyThreshold: 10,
        routerReplicas: 1,
        seed: 1,
        events: [],
        clients: 3,
      })
      // 30 requests drawn in far less than the minute the timestamps would have taken each.
      expect(r.requests).toBe(30)
      for (const s of r.strategies) expect(s.requests).toBe(30)
    }
  })

  it('replays through the command line, closed loop too, and bad lines exit 2 naming --trace', () => {
    const lines = Array.from({ length: 40 }, (_, i) => line(i * 250, 700 + i, 4, [0, 1000 + i]))
    const p = file('cli.jsonl', lines)
    const args = ['--trace', p, '--trace-format', 'hash-ids', '--profile', 'tiny', '--instances', '2', '--strategies', 'random,prefix_aware', '--quiet']
    const ok = spawnSync(process.execPath, [cli, 'replay', ...args, '--out', join(dir, 'out')], { encoding: 'utf8' })
    expect(ok.stderr).toBe('')
    expect(ok.status).toBe(0)
    expect(ok.stdout).toMatch(/^trace .*cli\.jsonl: 2 × tiny, 9\.8s simulated.*: 40 requests/)
    const closed = spawnSync(process.execPath, [cli, 'replay', ...args, '--clients', '4', '--duration', '1m', '--out', join(dir, 'out2')], { encoding: 'utf8' })
    expect(closed.stderr).toBe('')
    expect(closed.status).toBe(0)
    expect(closed.stdout).toMatch(/closed loop with 4 clients: up to 40 requests a lane/)
    // The text is made for --tokenizer: each prompt is its input_length under either, with the
    // same sharing, so the ideal hit rate (a function of token counts and shared blocks of 16)
    // is the same under both, open and closed loop. Text made for the other tokenizer would
    // be a different number of tokens.
    for (const loop of [[], ['--clients', '4', '--duration', '1m']]) {
      const ideal = TOKENIZERS.map((tokenizer) => {
        const out = join(dir, `out-${tokenizer}-${loop.length}`)
        const res = spawnSync(process.execPath, [cli, 'replay', ...args, ...loop, '--tokenizer', tokenizer, '--out', out], { encoding: 'utf8' })
        expect(res.stderr).toBe('')
        expect(res.status).toBe(0)
        return (JSON.parse(readFileSync(join(out, 'replay.json'), 'utf8')) as { ideal: { hitRate: number } }).ideal.hitRate
      })
      expect(ideal[0]).toBeGreaterThan(0.3)
      expect(ideal[1]).toBe(ideal[0])
    }
    const small = spawnSync(process.execPath, [cli, 'replay', ...args, '--trace-block-tokens', '256'], { encoding: 'utf8' })
    expect(small.status).toBe(2)
    expect(small.stderr).toMatch(/^prefix-router: --trace .*cli\.jsonl line 1: "hash_ids" has 2 id\(s\) but input_length 700 in blocks of 256 tokens needs 3/)
  })
})
