// The replay's outputs besides the charts: a Markdown table (stdout) and the JSON file.
import { LIMITS } from '../core/options.js'
import { formatDuration } from './duration.js'
import type { ReplayResult, StrategyResult } from './result.js'

const pct = (v: number | null, digits = 1): string => (v === null ? '—' : Number.isNaN(v) ? 'n/a' : `${(v * 100).toFixed(digits)}%`)
const ms = (v: number): string => (Number.isNaN(v) ? 'n/a' : `${Math.round(v)}`)
const num = (v: number, digits = 1): string => (Number.isNaN(v) ? 'n/a' : v.toLocaleString('en-US', { maximumFractionDigits: digits, minimumFractionDigits: digits }))

/** "long-context (rate 14, documents 1000, …)" or "trace file.jsonl". */
export function describeSource(r: ReplayResult): string {
  if ('trace' in r.source) return `trace ${r.source.trace}`
  const params = Object.entries(r.source.params).map(([k, v]) => `${k} ${v}`)
  return `${r.source.workload} (${params.join(', ')})`
}

export function markdownReport(r: ReplayResult): string {
  const lines: string[] = []
  lines.push(
    `${describeSource(r)}: ${r.instances} × ${r.profile}${r.tokenizer === 'bytes' ? '' : ` (tokenizer ${r.tokenizer})`}, ` +
      `${formatDuration(r.durationMs)} simulated, seed ${r.seed}, ` +
      `prefix length ${r.prefixLength}, concurrency threshold ${r.concurrencyThreshold ?? `${LIMITS.concurrencyThreshold.default} (longest_prefix: none)`}` +
      `${r.routerReplicas > 1 ? `, ${r.routerReplicas} router replicas` : ''}` +
      `${r.clients === null ? `: ${r.requests.toLocaleString('en-US')} requests; ` : `, closed loop with ${r.clients} clients: up to ${r.requests.toLocaleString('en-US')} requests a lane; `}` +
      `ideal hit rate ${pct(r.ideal.hitRate)}.`,
  )
  for (const note of r.notes ?? []) lines.push('', note)
  lines.push('')
  const random = r.strategies.find((s) => s.strategy === 'random')
  const vs = (s: StrategyResult, k: 'p50' | 'p90'): string => {
    if (random === undefined || s === random) return ''
    const d = s.ttftMs[k] / random.ttftMs[k] - 1
    return ` (${d > 0 ? '+' : ''}${(d * 100).toFixed(0)}%)`
  }
  lines.push('| strategy | P50 TTFT ms | P90 TTFT ms | P99 TTFT ms | hit rate | of ideal | req/s | output tok/s | instance share | overflow |')
  lines.push('| --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: | :---: | ---: |')
  for (const s of r.strategies) {
    lines.push(
      `| ${s.strategy} | ${ms(s.ttftMs.p50)}${vs(s, 'p50')} | ${ms(s.ttftMs.p90)}${vs(s, 'p90')} | ${ms(s.ttftMs.p99)} | ` +
        `${pct(s.hitRate)} | ${pct(s.ofIdeal)} | ${num(s.throughput.requestsPerSec, 2)} | ${num(s.throughput.outputTokensPerSec, 0)} | ` +
        `${pct(s.shareMin)}–${pct(s.shareMax)} | ${pct(s.overflowRate)} |`,
    )
  }
  const eventFed = r.strategies.filter((s) => s.kvEvents === true).map((s) => s.strategy)
  if (eventFed.length > 0) {
    lines.push('', `${eventFed.join(', ')}: fed by the engines' KV events, ${r.kvEventsDelayMs} ms of simulated time after each engine step.`)
  }
  const engineFed = r.strategies.filter((s) => s.engineLoad === true).map((s) => s.strategy)
  if (engineFed.length > 0 && r.engineLoadIntervalMs > 0) {
    lines.push('', `${engineFed.join(', ')}: ${r.routerReplicas > 1 ? 'each replica reads' : 'reads'} the engines' running and waiting requests every ${r.engineLoadIntervalMs} ms (--engine-load-interval), as serve scrapes /metrics.`)
  }
  const sharing = r.strategies.filter((s) => s.sharedLoad).map((s) => s.strategy)
  if (sharing.length > 0) {
    lines.push('', `${sharing.join(', ')}: the replicas share their queued prefill every ${r.shareLoadIntervalMs} ms, reaching the others ${r.shareLoadDelayMs} ms later (--share-load-interval, --share-load-delay), as serve --share-load does through Redis.`)
  }
  lines.push(...oneRouterTable(r))
  lines.push(...phaseTables(r))
  const rejected = r.strategies[0]?.rejected ?? 0
  if (rejected > 0) lines.push('', `${rejected} request(s) exceeded the model's context and were rejected (counted in no column).`)
  if (r.strategies.some((s) => s.events.length > 0)) {
    lines.push('', `Scale events (window ${formatDuration(r.windowMs)}):`, '')
    lines.push('| strategy | event | moved | churn before | hit rate before | recovery | its share after (fair) | its keys went to |')
    lines.push('| --- | --- | ---: | ---: | ---: | ---: | ---: | ---: |')
    for (const s of r.strategies) {
      for (const e of s.events) {
        const rec = e.recoveryMs === null ? 'not within the run' : formatDuration(e.recoveryMs)
        const share = e.kind === 'add' ? `${pct(e.joinedShare)} (${pct(e.fairShare)})` : '—'
        const spread = e.kind === 'remove' ? `${e.spreadTo} instances, at most ${pct(e.spreadMax)}` : '—'
        lines.push(`| ${s.strategy} | ${e.kind} at ${formatDuration(e.atMs)} | ${pct(e.moved)} | ${pct(e.churn)} | ${pct(e.hitBefore)} | ${rec} | ${share} | ${spread} |`)
      }
    }
  }
  return `${lines.join('\n')}\n`
}

/** With replicas: each strategy with one router and with K, side by side, and what K cost. */
function oneRouterTable(r: ReplayResult): string[] {
  if (r.oneRouter === undefined) return []
  const k = r.routerReplicas
  const change = (a: number, b: number): string => {
    const d = b / a - 1
    return Number.isFinite(d) ? `${d > 0 ? '+' : ''}${(d * 100).toFixed(1)}%` : 'n/a'
  }
  const lines = ['', `One router against ${k} replicas, on the same requests:`, '']
  lines.push(`| strategy | 1 router: hit · P50 / P90 ms | ${k} replicas: hit · P50 / P90 ms | hit rate | P50 | P90 |`)
  lines.push('| --- | --- | --- | ---: | ---: | ---: |')
  r.strategies.forEach((s, i) => {
    const one = r.oneRouter![i]!
    const pts = (s.hitRate - one.hitRate) * 100
    lines.push(
      `| ${s.strategy} | ${pct(one.hitRate)} · ${ms(one.ttftMs.p50)} / ${ms(one.ttftMs.p90)} | ${pct(s.hitRate)} · ${ms(s.ttftMs.p50)} / ${ms(s.ttftMs.p90)} | ` +
        `${pts >= 0 ? '+' : ''}${pts.toFixed(1)} pts | ${change(one.ttftMs.p50, s.ttftMs.p50)} | ${change(one.ttftMs.p90, s.ttftMs.p90)} |`,
    )
  })
  return lines
}

/** One table per phase (cache-pressure's rate steps), strategies as rows. */
function phaseTables(r: ReplayResult): string[] {
  const first = r.strategies[0]?.phases
  if (first === undefined || first.length === 0) return []
  const lines: string[] = []
  first.forEach((ph, k) => {
    lines.push('', `Step ${k + 1}: ${ph.label}, arrivals ${formatDuration(ph.startMs)}–${formatDuration(ph.endMs)}:`, '')
    lines.push('| strategy | P50 TTFT ms | P90 TTFT ms | hit rate | output tok/s | completed |')
    lines.push('| --- | ---: | ---: | ---: | ---: | ---: |')
    for (const s of r.strategies) {
      const p = s.phases![k]!
      lines.push(`| ${s.strategy} | ${ms(p.ttftMs.p50)} | ${ms(p.ttftMs.p90)} | ${pct(p.hitRate)} | ${num(p.outputTokensPerSec, 0)} | ${p.completed.toLocaleString('en-US')} |`)
    }
  })
  return lines
}

/** The JSON file: the whole result, plus the command that produced it. */
export function jsonReport(r: ReplayResult, command: string): string {
  return `${JSON.stringify({ command, ...r }, (_k, v: unknown) => (typeof v === 'number' && !Number.isFinite(v) ? null : v), 2)}\n`
}
