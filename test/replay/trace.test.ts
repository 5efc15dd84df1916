import { spawnSync } from 'node:child_process'
import { mkdtempSync, rmSync, writeFileSync } from 'node:fs'
import { tmpdir } from 'node:os'
import { join } from 'node:path'
import { fileURLToPath } from 'node:url'
import { afterAll, describe, expect, it } from 'vitest'
import { checkTrace, parseTraceLine, readTrace, TraceError } from '../../src/replay/trace.js'

const dir = mkdtempSync(join(tmpdir(), 'pr-trace-'))
afterAll(() => rmSync(dir, { recursive: true, force: true }))
const cli = fileURLToPath(new URL('../../dist/cli.js', import.meta.url))

function file(name: string, lines: unknown[]): string {
  const p = join(dir, name)
  writeFileSync(p, lines.map((l) => (typeof l === 'string' ? l : JSON.stringify(l))).join('\n'))
  return p
}

async function all(path: string) {
  const out = []
  for await (const r of readTrace(path)) out.push(r)
  return out
}

describe('JSONL traces', () => {
  it('reads bodies with timestamps relative to the first, strips the replay fields, infers the API', async () => {
    const p = file('ok.jsonl', [
      { timestamp: 1_700_000_000_000, messages: [{ role: 'user', content: 'Hi' }], max_tokens: 8 },
      '',
      { timestamp: 1_700_000_000_250, tenant: 'acme', prompt: 'Once upon', model: 'm' },
      { timestamp: 1_700_000_001_000, api: 'chat', messages: [{ role: 'user', content: 'x' }], prompt_cache_key: 'k' },
    ])
    const reqs = await all(p)
    expect(reqs.map((r) => r.at)).toEqual([0, 250, 1000])
    expect(reqs.map((r) => r.api)).toEqual(['chat', 'completions', 'chat'])
    expect(reqs[0]!.body).toEqual({ messages: [{ role: 'user', content: 'Hi' }], max_tokens: 8 })
    expect(reqs[1]!.tenant).toBe('acme')
    expect(reqs[1]!.body).toEqual({ prompt: 'Once upon', model: 'm' })
    expect('timestamp' in reqs[2]!.body || 'api' in reqs[2]!.body).toBe(false)
    expect(await checkTrace(p)).toEqual({ requests: 3, spanMs: 1000 })
  })

  it('accepts ISO 8601 timestamps', async () => {
    const p = file('iso.jsonl', [
      { timestamp: '2025-06-01T12:00:00Z', prompt: 'a' },
      { timestamp: '2025-06-01T12:00:01.5Z', prompt: 'b' },
    ])
    expect((await all(p)).map((r) => r.at)).toEqual([0, 1500])
  })

  it('names the file and line of what cannot be replayed', async () => {
    const cases: [unknown, RegExp][] = [
      ['{not json', /line 1: not valid JSON/],
      [[1, 2], /line 1: each line must be a JSON object/],
      [{ messages: [{ role: 'user', content: 'x' }] }, /line 1: "timestamp" must be a number of milliseconds or an ISO 8601 date; got undefined/],
      [{ timestamp: 'yesterday', prompt: 'x' }, /"timestamp" must be/],
      [{ timestamp: 0, messages: [] }, /line 1: 'messages' must be a non-empty array/],
      [{ timestamp: 0, prompt: 'x', api: 'embeddings' }, /"api" must be "chat" or "completions"/],
      [{ timestamp: 0, prompt: 'x', tenant: 'é'.repeat(3) }, /X-Amzn-SageMaker-Prefix-Aware-Id|tenant/i],
      [{ timestamp: 0, messages: [{ role: 'wizard', content: 'x' }] }, /messages\[0\]\.role must be one of/],
      [{ timestamp: 0, prompt: 'x', max_tokens: 0 }, /max_tokens must be at least 1/],
    ]
    for (const [line, re] of cases) {
      const text = typeof line === 'string' ? line : JSON.stringify(line)
      expect(() => parseTraceLine(text, 't.jsonl', 1)).toThrow(TraceError)
      expect(() => parseTraceLine(text, 't.jsonl', 1)).toThrow(re)
    }
    const back = file('back.jsonl', [{ timestamp: 100, prompt: 'a' }, { timestamp: 50, prompt: 'b' }])
    await expect(all(back)).rejects.toThrow(/back\.jsonl line 2: timestamps must not decrease/)
    await expect(checkTrace(file('empty.jsonl', ['', '']))).rejects.toThrow(/has no requests/)
  })

  it('refuses a trace that mixes numbers of milliseconds and ISO dates, naming the line', async () => {
    // A 0 and a 2025 date are 55 years apart: replayed, that is 485,772 hours of nothing.
    const mixed = file('mixed.jsonl', [{ timestamp: 0, prompt: 'a' }, '', { timestamp: '2025-06-01T12:00:00.250Z', prompt: 'b' }])
    await expect(checkTrace(mixed)).rejects.toThrow(/mixed\.jsonl line 3: "timestamp" is an ISO 8601 date here but a number of milliseconds on line 1; a trace gives every timestamp the same way/)
    const other = file('mixed2.jsonl', [{ timestamp: '2025-06-01T12:00:00Z', prompt: 'a' }, { timestamp: 1_748_779_200_250, prompt: 'b' }])
    await expect(all(other)).rejects.toThrow(/mixed2\.jsonl line 2: "timestamp" is a number of milliseconds here but an ISO 8601 date on line 1/)
  })

  it('replays through the command line, and bad traces exit 2 naming --trace', () => {
    const lines = []
    for (let i = 0; i < 60; i++) {
      lines.push({ timestamp: i * 500, messages: [{ role: 'system', content: `Shared instructions ${i % 3} `.repeat(40) }, { role: 'user', content: `question ${i}` }], max_tokens: 4 })
    }
    // Over the tiny profile's 32,768-token context: vLLM would answer 400; the replay counts it.
    lines.push({ timestamp: 29_600, messages: [{ role: 'user', content: 'long answer please' }], max_tokens: 40_000 })
    const p = file('cli.jsonl', lines)
    const out = join(dir, 'out')
    const ok = spawnSync(process.execPath, [cli, 'replay', '--trace', p, '--profile', 'tiny', '--instances', '3', '--strategies', 'random,prefix_aware', '--out', out, '--quiet'], { encoding: 'utf8' })
    expect(ok.stderr).toBe('')
    expect(ok.status).toBe(0)
    expect(ok.stdout).toMatch(/^trace .*cli\.jsonl: 3 × tiny, 29\.6s simulated.*: 61 requests/)
    expect(ok.stdout).toMatch(/1 request\(s\) exceeded the model's context and were rejected/)
    const bad = spawnSync(process.execPath, [cli, 'replay', '--trace', file('bad.jsonl', [{ timestamp: 0, prompt: 'a' }, '{']), '--quiet'], { encoding: 'utf8' })
    expect(bad.status).toBe(2)
    expect(bad.stderr).toMatch(/^prefix-router: --trace .*bad\.jsonl line 2: not valid JSON/)
    const missing = spawnSync(process.execPath, [cli, 'replay', '--trace', join(dir, 'nope.jsonl')], { encoding: 'utf8' })
    expect(missing.status).toBe(2)
    expect(missing.stderr).toMatch(/--trace cannot read/)
  })
})
