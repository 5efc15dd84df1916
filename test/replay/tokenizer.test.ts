// `replay --tokenizer o200k`: requests are prepared with the lanes' tokenizer, and the
// report says which one was used (and says nothing for the default, so outputs stay as
// they were).
import { spawnSync } from 'node:child_process'
import { mkdtempSync, readFileSync, rmSync } from 'node:fs'
import { tmpdir } from 'node:os'
import { join } from 'node:path'
import { fileURLToPath } from 'node:url'
import { afterAll, describe, expect, it } from 'vitest'
import { prepareRequest } from '../../src/replay/prepare.js'
import { markdownReport } from '../../src/replay/report.js'
import { runReplay } from '../../src/replay/run.js'
import { resolveStrategies } from '../../src/replay/strategies.js'
import { resolveParams } from '../../src/replay/types.js'
import { WORKLOADS } from '../../src/replay/workloads/index.js'
import type { TokenizerName } from '../../src/sim/tokenizers/index.js'
import { VirtualFleet } from '../../src/sim/virtual-fleet.js'

const cli = fileURLToPath(new URL('../../dist/cli.js', import.meta.url))
const dir = mkdtempSync(join(tmpdir(), 'pr-replay-tok-'))
afterAll(() => rmSync(dir, { recursive: true, force: true }))

const KNOBS = { rate: 20, documents: 50, 'doc-tokens': 500, 'question-tokens': 16, 'output-tokens': 8 }
const conversations = WORKLOADS['conversations']!

function replay(tokenizer: TokenizerName) {
  const lc = WORKLOADS['long-context']!
  const params = resolveParams(lc, KNOBS)
  return runReplay({
    requests: lc.generate(params, { seed: 1, durationMs: 20_000 }),
    source: { workload: lc.name, params },
    strategies: resolveStrategies(['random', 'prefix_aware']),
    instances: 2,
    durationMs: 20_000,
    sim: { profile: 'tiny', tokenizer },
    prefixLength: 4096,
    concurrencyThreshold: 10,
    routerReplicas: 1,
    seed: 1,
    events: [],
  })
}

describe('replay under o200k', () => {
  it('prepares prompts as the lanes’ o200k fleets key them', () => {
    const fleet = new VirtualFleet({ instances: 1, profile: 'tiny', tokenizer: 'o200k' })
    const o = { model: fleet.sim.model, blockSize: fleet.sim.engine.blockSize, tokenizer: fleet.sim.tokenizer }
    const r = [...conversations.generate(resolveParams(conversations, {}), { seed: 3, durationMs: 5_000 })].slice(0, 5)
    expect(r.length).toBeGreaterThan(0)
    for (const [i, req] of r.entries()) {
      const p = prepareRequest(req, i, o)
      const body = req.body as { messages: { role: string; content: string }[] }
      const direct = fleet.prepare({ messages: body.messages })
      expect(p.prompt.promptTokens).toBe(direct.promptTokens)
      expect([...p.prompt.blockKeys]).toEqual([...direct.blockKeys])
    }
  })

  it('runs, and the result and the report name the tokenizer only when it is not bytes', async () => {
    const [bytes, o200k] = [await replay('bytes'), await replay('o200k')]
    expect(o200k.tokenizer).toBe('o200k')
    expect(bytes.tokenizer).toBe('bytes')
    expect(o200k.requests).toBe(bytes.requests)
    expect(o200k.strategies[0]!.ttftMs.p50).not.toBe(bytes.strategies[0]!.ttftMs.p50)
    expect(markdownReport(o200k).split('\n')[0]).toMatch(/: 2 × tiny \(tokenizer o200k\), 20s simulated/)
    expect(markdownReport(bytes)).not.toMatch(/tokenizer/)
  })

  it('prefix-router replay --tokenizer: a bad value is one line naming the flag, exit 2', () => {
    const r = spawnSync(process.execPath, [cli, 'replay', '--tokenizer', 'o200k_base'], { encoding: 'utf8' })
    expect(r.status).toBe(2)
    expect(r.stderr).toMatch(/--tokenizer must be one of bytes, o200k; got 'o200k_base'/)
    expect(r.stderr.trim().split('\n')).toHaveLength(1)
  })

  it('prefix-router replay --tokenizer o200k', () => {
    const out = join(dir, 'cli')
    const knobs = Object.entries(KNOBS).flatMap(([k, v]) => [`--${k}`, String(v)])
    const args = ['replay', '--profile', 'tiny', '--instances', '2', '--duration', '10s', '--strategies', 'random', ...knobs, '--tokenizer', 'o200k', '--out', out, '--quiet']
    const res = spawnSync(process.execPath, [cli, ...args], { encoding: 'utf8' })
    expect(res.stderr).toBe('')
    expect(res.status).toBe(0)
    expect(res.stdout).toMatch(/^long-context \(.*\): 2 × tiny \(tokenizer o200k\), 10s simulated/)
    expect(JSON.parse(readFileSync(join(out, 'replay.json'), 'utf8')).tokenizer).toBe('o200k')
  })
})
