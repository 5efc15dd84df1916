// `prefix-router replay --prefill N --decode M`: bad flags are named with the value refused, and
// a small run prints the disaggregated lanes beside the aggregated one.
import { spawnSync } from 'node:child_process'
import { mkdtempSync, readFileSync, rmSync } from 'node:fs'
import { tmpdir } from 'node:os'
import { join } from 'node:path'
import { fileURLToPath } from 'node:url'
import { describe, expect, it } from 'vitest'

const cli = fileURLToPath(new URL('../../dist/cli.js', import.meta.url))

describe('prefix-router replay --prefill/--decode', () => {
  const bad = (args: string[], re: RegExp) => {
    const res = spawnSync(process.execPath, [cli, 'replay', '--quiet', ...args], { encoding: 'utf8' })
    expect(res.status, args.join(' ')).toBe(2)
    expect(res.stderr).toMatch(re)
  }

  it('names the bad flag and value', () => {
    bad(['--prefill', '0', '--decode', '2'], /--prefill must be an integer from 1 to 128; got '0'/)
    bad(['--prefill', '2', '--decode', 'two'], /--decode must be an integer from 1 to 128; got 'two'/)
    bad(['--prefill', '2'], /--prefill needs --decode: a disaggregated replay takes both counts, e\.g\. --prefill 2 --decode 2/)
    bad(['--decode', '2'], /--decode needs --prefill/)
    bad(['--sweep', '1,2'], /--sweep needs --prefill/)
    bad(['--prefill', '2', '--decode', '2', '--instances', '4'], /--instances does not apply with --prefill\/--decode: the aggregated lane has 4 instances/)
    bad(['--prefill', '2', '--decode', '2', '--router-replicas', '2'], /--router-replicas does not apply with --prefill\/--decode/)
    bad(['--prefill', '2', '--decode', '2', '--sweep', '1,0'], /--sweep takes load factors above 0 and at most 64, comma-separated \(e\.g\. 0\.5,1,2,4\); got '0' in '1,0'/)
    bad(['--prefill', '2', '--decode', '2', '--ttft-slo', 'fast'], /--ttft-slo must be a duration such as 1h, 30m, 90s or 500ms; got 'fast'/)
    bad(['--prefill', '2', '--decode', '2', '--pd-threshold', '1.5'], /--pd-threshold must be an integer from 0 to 1048576; got '1.5'/)
    bad(['--prefill', '2', '--decode', '2', '--pd-decode-prefill-cap', 'lots'], /--pd-decode-prefill-cap must be an integer from 0 to 1048576; got 'lots'/)
    bad(['--pd-decode-prefill-cap', '0'], /--pd-decode-prefill-cap needs --prefill/)
    bad(['--prefill', '2', '--decode', '2', '--strategies', 'pd,random'], /--strategies: unknown lane 'random' with --prefill\/--decode/)
  })

  it('prints every lane and writes pd-replay.json', () => {
    const out = mkdtempSync(join(tmpdir(), 'pd-cli-'))
    try {
      const res = spawnSync(
        process.execPath,
        [cli, 'replay', '--quiet', '--profile', 'tiny', '--workload', 'shared-prefix', '--groups', '4', '--prompts-per-group', '4', '--system-tokens', '256', '--question-tokens', '32', '--output-tokens', '16', '--rate', '4', '--prefill', '1', '--decode', '1', '--duration', '20s', '--sweep', '1,2', '--tpot-slo', '40ms', '--out', out],
        { encoding: 'utf8' },
      )
      expect(res.stderr).toBe('')
      expect(res.status).toBe(0)
      expect(res.stdout).toMatch(/1 prefill \+ 1 decode instances against 2 aggregated \(tiny\); SLO: TTFT ≤ 1000 ms and TPOT ≤ 40 ms/)
      for (const lane of ['aggregated', 'pd', 'pd_always', 'vllm_pd', 'sglang_pd', 'llmd_pd', 'dynamo_pd']) expect(res.stdout).toMatch(new RegExp(`\\| ${lane} \\| (2 agg|1P\\+1D) \\|`))
      expect(res.stdout).toMatch(/Load ×2: /)
      expect(res.stdout).toMatch(/Sweep: P90 TTFT \/ P90 TPOT ms by load/)
      const json = JSON.parse(readFileSync(join(out, 'pd-replay.json'), 'utf8')) as { runs: { load: number; lanes: unknown[] }[] }
      expect(json.runs.map((r) => r.load)).toEqual([1, 2])
      expect(json.runs[0]!.lanes).toHaveLength(7)
    } finally {
      rmSync(out, { recursive: true, force: true })
    }
  })
})
