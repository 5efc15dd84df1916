// Production-shaped traces: the replay tables of docs/replay.md's "Production-shaped traces",
// and a check of longest_prefix against its targets on them, from commands a user can run.
//
// For each shape (a chat service in two 10-minute windows, and mixed public-dataset
// requests), at 4 and 8 instances, under both simulator tokenizers, it runs
//   prefix-router make-trace …   then   prefix-router replay --trace … --trace-format hash-ids
// with every strategy, prints the table, and checks the recommended configuration (the default
// longest_prefix) against the best of the peers in the same run: hit rate ≥ 97% of the ideal,
// P50 and P90 TTFT no worse than the best of sglang_cache_aware and llmd_default. Then, for
// concurrency thresholds 1024 and 1, it checks that no instance takes more than 1.5× its fair
// share of requests, on every trace and every workload.
// Run: npm run bench:traces   (TOKENIZERS=bytes, SHAPES=chat-a, SKIP_FAIRNESS=1 to shorten it)
import { execFileSync } from 'node:child_process'
import { mkdtempSync, readFileSync, rmSync } from 'node:fs'
import { cpus, tmpdir } from 'node:os'
import { join } from 'node:path'
import { fileURLToPath } from 'node:url'
import type { ReplayResult, StrategyResult } from '../src/replay/result.js'
import { WORKLOADS } from '../src/replay/workloads/index.js'

const root = fileURLToPath(new URL('..', import.meta.url))
const dir = mkdtempSync(join(tmpdir(), 'pr-traces-'))
const RECOMMENDED = 'longest_prefix'
const PEERS = ['sglang_cache_aware', 'llmd_default']

interface Shape {
  name: string
  title: string
  make: string[]
}
const SHAPES: Shape[] = [
  { name: 'chat-a', title: 'chat service, minutes 10–20', make: ['--shape', 'chat', '--start', '10m', '--duration', '10m'] },
  { name: 'chat-b', title: 'the same service, minutes 30–40', make: ['--shape', 'chat', '--start', '30m', '--duration', '10m'] },
  { name: 'mixed', title: 'mixed public-dataset requests, minutes 10–20', make: ['--shape', 'mixed', '--start', '10m', '--duration', '10m'] },
]
const wanted = (env: string | undefined, all: string[]): string[] => (env === undefined ? all : env.split(',').filter((s) => all.includes(s)))
const shapes = SHAPES.filter((s) => wanted(process.env.SHAPES, SHAPES.map((x) => x.name)).includes(s.name))
const tokenizers = wanted(process.env.TOKENIZERS, ['bytes', 'o200k'])
const fleets = [4, 8]

function cli(args: string[]): string {
  return execFileSync(process.execPath, ['--initial-old-space-size=128', 'dist/cli.js', ...args], { cwd: root, encoding: 'utf8', maxBuffer: 64 << 20, stdio: ['ignore', 'pipe', 'pipe'] })
}

/** Runs a replay; returns its result and the command as a user would type it. */
function replay(args: string[]): { result: ReplayResult; command: string; table: string } {
  const out = join(dir, `out-${Math.random().toString(36).slice(2)}`)
  const table = cli(['replay', ...args, '--quiet', '--out', out])
  const result = JSON.parse(readFileSync(join(out, 'replay.json'), 'utf8')) as ReplayResult
  return { result, command: `npx prefix-router replay ${args.join(' ')}`, table }
}

const by = (r: ReplayResult, name: string): StrategyResult => r.strategies.find((s) => s.strategy === name)!
const pct = (v: number): string => `${(v * 100).toFixed(1)}%`

const failures: string[] = []
function check(what: string, ok: boolean, detail: string): void {
  if (!ok) failures.push(`${what}: ${detail}`)
  console.log(`  ${ok ? 'met ' : 'MISS'} ${what}: ${detail}`)
}

console.log(`machine: ${cpus().length} × ${cpus()[0]?.model ?? 'unknown CPU'}; node ${process.version}\n`)
const traces: { shape: Shape; file: string }[] = []
for (const shape of shapes) {
  const file = join(dir, `${shape.name}.jsonl`)
  cli(['make-trace', ...shape.make, '--out', file, '--quiet'])
  traces.push({ shape, file })
}

for (const { shape, file } of traces) {
  for (const instances of fleets) {
    for (const tokenizer of tokenizers) {
      const args = ['--trace', `${shape.name}.jsonl`, '--trace-format', 'hash-ids', '--instances', String(instances), '--tokenizer', tokenizer]
      const t0 = performance.now()
      const { result, command, table } = replay(['--trace', file, ...args.slice(2)])
      const seconds = (performance.now() - t0) / 1000
      console.log(`### ${shape.title}, ${instances} instances, ${tokenizer} tokenizer`)
      console.log(`\`npx prefix-router make-trace ${shape.make.join(' ')} --out ${shape.name}.jsonl\`, then \`${command.replace(file, `${shape.name}.jsonl`)}\` (${seconds.toFixed(0)} s)\n`)
      console.log(table)
      const mine = by(result, RECOMMENDED)
      const peers = PEERS.map((p) => by(result, p))
      // Compared as the tables show them, in whole milliseconds; the detail gives a decimal more.
      const best50 = Math.min(...peers.map((p) => p.ttftMs.p50))
      const best90 = Math.min(...peers.map((p) => p.ttftMs.p90))
      const where = `${shape.name}, ${instances} instances, ${tokenizer}`
      const ms = (v: number): string => `${v.toFixed(1)} ms`
      check(`${where}: hit rate ≥ 97% of the ideal`, mine.ofIdeal >= 0.97, `${pct(mine.ofIdeal)} (${pct(mine.hitRate)} of ${pct(result.ideal.hitRate)})`)
      check(`${where}: P50 ≤ best peer`, Math.round(mine.ttftMs.p50) <= Math.round(best50), `${ms(mine.ttftMs.p50)} against ${ms(best50)}`)
      check(`${where}: P90 ≤ best peer`, Math.round(mine.ttftMs.p90) <= Math.round(best90), `${ms(mine.ttftMs.p90)} against ${ms(best90)}`)
      console.log('')
    }
  }
}

if (process.env.SKIP_FAIRNESS === undefined) {
  // Fair share: no instance above 1.5 × 1/n of requests, with the threshold out of reach and
  // with a threshold of 1, on every trace above and every generated workload (1 h, 7 instances).
  console.log('### Fair share, longest_prefix (both placements), thresholds 1024 and 1\n')
  const cases: { label: string; args: string[]; instances: number }[] = []
  for (const { shape, file } of traces) {
    for (const instances of fleets) cases.push({ label: `${shape.name} ×${instances}`, args: ['--trace', file, '--trace-format', 'hash-ids'], instances })
  }
  for (const w of Object.keys(WORKLOADS)) cases.push({ label: `${w} ×7`, args: ['--workload', w, '--duration', '1h'], instances: 7 })
  for (const c of cases) {
    for (const threshold of [1024, 1]) {
      const { result } = replay([...c.args, '--instances', String(c.instances), '--concurrency-threshold', String(threshold), '--strategies', `${RECOMMENDED},longest_prefix:hash`])
      for (const s of result.strategies) {
        const what = `${c.label}, threshold ${threshold}, ${s.strategy}: largest share ≤ 1.5 × fair`
        const detail = `${pct(s.shareMax)} (fair ${pct(1 / c.instances)}, shares ${pct(s.shareMin)}–${pct(s.shareMax)})`
        // The target is the recommended configuration's; hash placement is shown for comparison.
        if (s.strategy === RECOMMENDED) check(what, s.shareMax <= 1.5 / c.instances, detail)
        else console.log(`  info ${what}: ${detail}`)
      }
    }
  }
}

rmSync(dir, { recursive: true, force: true })
console.log(failures.length === 0 ? '\nall targets met' : `\n${failures.length} target(s) missed:\n${failures.map((f) => `  ${f}`).join('\n')}`)
