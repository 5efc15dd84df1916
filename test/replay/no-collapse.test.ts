// A block that every request shares must not pull the fleet onto the first instance that
// computed it: with no threshold in reach (1024), longest_prefix spreads such a trace over
// every instance, and no instance takes more than 1.5× its fair share.
import { mkdtempSync, rmSync, writeFileSync } from 'node:fs'
import { tmpdir } from 'node:os'
import { join } from 'node:path'
import { afterAll, describe, expect, it } from 'vitest'
import { runReplay } from '../../src/replay/run.js'
import { resolveStrategies } from '../../src/replay/strategies.js'
import { readTrace, type TraceFormat } from '../../src/replay/trace.js'

const dir = mkdtempSync(join(tmpdir(), 'pr-collapse-'))
afterAll(() => rmSync(dir, { recursive: true, force: true }))
const HASH_IDS: TraceFormat = { kind: 'hash-ids', blockTokens: 512, tokenizer: 'bytes' }

describe('a block shared by every request', () => {
  // 600 requests over 30 s, each [shared block 0, two blocks of its own]: ~1,200 tokens, 200
  // out, so on the tiny profile a few dozen are in flight at once.
  const path = join(dir, 'shared-first-block.jsonl')
  writeFileSync(
    path,
    Array.from({ length: 600 }, (_, i) => JSON.stringify({ timestamp: i * 50, input_length: 1200, output_length: 200, hash_ids: [0, 1 + 2 * i, 2 + 2 * i] })).join('\n') + '\n',
  )

  for (const threshold of [1024, 1]) {
    it(`spreads over every instance with concurrency threshold ${threshold}`, async () => {
      const r = await runReplay({
        requests: readTrace(path, HASH_IDS),
        source: { trace: path },
        strategies: resolveStrategies(['longest_prefix', 'longest_prefix:hash']),
        instances: 4,
        durationMs: 30_001,
        sim: { profile: 'tiny' },
        prefixLength: 4096,
        concurrencyThreshold: threshold,
        routerReplicas: 1,
        seed: 1,
        events: [],
      })
      for (const s of r.strategies) {
        expect(s.requests, s.strategy).toBe(600)
        expect(Object.keys(s.instanceShares), s.strategy).toHaveLength(4)
        expect(s.shareMin, `${s.strategy}: ${JSON.stringify(s.instanceShares)}`).toBeGreaterThan(0.25 / 2)
        expect(s.shareMax, `${s.strategy}: ${JSON.stringify(s.instanceShares)}`).toBeLessThanOrEqual(0.25 * 1.5)
      }
    })
  }
})
