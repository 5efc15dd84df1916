// Router replicas as good as one, in replays, from commands a user can run, with PASS/FAIL per
// target. The recommended configuration for K replicas is longest_prefix with the exact view
// (the engines' KV events), the engines' load from /metrics, and the replicas' queued prefill
// shared through Redis: the replay's `longest_prefix:shared` lane.
//
//   1. production-shaped hash-id traces (make-trace's chat windows and mixed shape), 4 and 8
//      instances, --router-replicas 4: longest_prefix:shared's P50 and P90 TTFT within 10% of the
//      same configuration with one router, its hit rate within 1 point; and its P50 and P90 no
//      worse than the best peer's with the same 4 replicas (SGLang's cache-aware policy, llm-d's
//      default and precise schedulers, Dynamo's KV router with and without replica sync).
//   2. scale events on the same traces (an instance added at 3 min, removed at 6 min), 4
//      replicas: the added instance gets ≥ half its fair share of requests in the minute after it
//      joins, and the keys moved to another instance in that minute are ≤ 1.1/N of those seen
//      before (N: the fleet after the join); the removed instance's keys go to more than one.
// Run: npx tsc -p tsconfig.build.json && npx tsx bench/replicas.bench.ts
//      (SHAPES=chat-a, INSTANCES=4, SKIP_SCALE=1 to shorten it)
import { join } from 'node:path'
import type { StrategyResult } from '../src/replay/result.js'
import { Checks, cli, machine, replay as run, scratch, wanted } from './replay-cli.js'

const dir = scratch('pr-replicas-')
const OURS = 'longest_prefix:shared'
const PEERS = ['sglang_cache_aware', 'llmd_default', 'llmd_precise', 'dynamo_kv', 'dynamo_kv:sync']
const REPLICAS = 4
const replay = (args: string[]) => run(dir, args)
const by = (list: StrategyResult[], name: string): StrategyResult => list.find((s) => s.strategy === name)!
const pct = (v: number): string => `${(v * 100).toFixed(1)}%`
const ms = (v: number): string => `${v.toFixed(1)} ms`
const checks = new Checks()
const check = checks.check.bind(checks)

console.log(`${machine()}\n`)

const SHAPES = [
  { name: 'chat-a', make: ['--shape', 'chat', '--start', '10m', '--duration', '10m'] },
  { name: 'chat-b', make: ['--shape', 'chat', '--start', '30m', '--duration', '10m'] },
  { name: 'mixed', make: ['--shape', 'mixed', '--start', '10m', '--duration', '10m'] },
]
const shapes = SHAPES.filter((s) => wanted(process.env.SHAPES, SHAPES.map((x) => x.name)).includes(s.name))
const fleets = wanted(process.env.INSTANCES, ['4', '8']).map(Number)

for (const shape of shapes) {
  const file = join(dir, `${shape.name}.jsonl`)
  cli(['make-trace', ...shape.make, '--out', file, '--quiet'])
  for (const instances of fleets) {
    const args = ['--trace-format', 'hash-ids', '--instances', String(instances), '--router-replicas', String(REPLICAS), '--strategies', [OURS, ...PEERS].join(',')]
    const { result, table, seconds } = replay(['--trace', file, ...args])
    const where = `${shape.name}, ${instances} instances`
    console.log(`### ${where}, ${REPLICAS} replicas\n\n\`npx prefix-router make-trace ${shape.make.join(' ')} --out ${shape.name}.jsonl\`, then \`npx prefix-router replay --trace ${shape.name}.jsonl ${args.join(' ')}\` (${seconds.toFixed(0)} s)\n`)
    console.log(table)
    const k = by(result.strategies, OURS)
    const one = by(result.oneRouter!, OURS)
    check(`${where}: ${REPLICAS} replicas' hit rate ≥ one router's − 1 point`, k.hitRate >= one.hitRate - 0.01, `${pct(k.hitRate)} against ${pct(one.hitRate)}`)
    check(`${where}: ${REPLICAS} replicas' P50 ≤ 1.10 × one router's`, k.ttftMs.p50 <= 1.1 * one.ttftMs.p50, `${ms(k.ttftMs.p50)} against ${ms(one.ttftMs.p50)}`)
    check(`${where}: ${REPLICAS} replicas' P90 ≤ 1.10 × one router's`, k.ttftMs.p90 <= 1.1 * one.ttftMs.p90, `${ms(k.ttftMs.p90)} against ${ms(one.ttftMs.p90)}`)
    for (const q of ['p50', 'p90'] as const) {
      const peers = PEERS.map((p) => by(result.strategies, p))
      const best = peers.reduce((a, b) => (b.ttftMs[q] < a.ttftMs[q] ? b : a))
      check(`${where}: ${q.toUpperCase()} ≤ the best peer's with ${REPLICAS} replicas`, k.ttftMs[q] <= best.ttftMs[q], `${ms(k.ttftMs[q])} against ${best.strategy}'s ${ms(best.ttftMs[q])}`)
    }
    console.log('')
  }
}

if (process.env.SKIP_SCALE === undefined) {
  for (const shape of shapes) {
    const file = join(dir, `${shape.name}.jsonl`)
    for (const instances of fleets) {
      const args = ['--trace-format', 'hash-ids', '--instances', String(instances), '--router-replicas', String(REPLICAS), '--strategies', OURS, '--add-instance-at', '3m', '--remove-instance-at', '6m']
      const { result, table, seconds } = replay(['--trace', file, ...args])
      const where = `${shape.name}, ${instances} instances, ${REPLICAS} replicas`
      console.log(`### scale events: ${where}\n\n\`npx prefix-router replay --trace ${shape.name}.jsonl ${args.join(' ')}\` (${seconds.toFixed(0)} s)\n`)
      console.log(table)
      const [add, remove] = by(result.strategies, OURS).events
      check(`${where}: the added instance's share in its first minute ≥ ½ fair`, add!.joinedShare >= 0.5 * add!.fairShare, `${pct(add!.joinedShare)} (fair ${pct(add!.fairShare)})`)
      check(`${where}: keys moved by the add ≤ 1.1/N`, add!.moved <= 1.1 * add!.fairShare, `${pct(add!.moved)} (1.1/N = ${pct(1.1 * add!.fairShare)}; churn before ${pct(add!.churn)})`)
      check(`${where}: the removed instance's keys spread`, remove!.spreadTo > 1, `${remove!.spreadTo} instances, at most ${pct(remove!.spreadMax)} on one`)
      console.log('')
    }
  }
}

checks.finish(dir)
