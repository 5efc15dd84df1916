// A disaggregated replay's Markdown: one table per load point, lanes as rows, and with a sweep a
// summary of each lane's P90 TTFT and TPOT across the loads.
import { formatDuration } from '../duration.js'
import type { PdReplayResult } from './run.js'

const ms = (v: number): string => (Number.isNaN(v) ? 'n/a' : `${Math.round(v)}`)
const ms1 = (v: number): string => (Number.isNaN(v) ? 'n/a' : v.toFixed(1))
const pct = (v: number): string => (Number.isNaN(v) ? 'n/a' : `${(v * 100).toFixed(1)}%`)

export function pdMarkdown(runs: readonly PdReplayResult[], source: string): string {
  const lines: string[] = []
  const first = runs[0]!
  lines.push(
    `${source}: ${first.prefill} prefill + ${first.decode} decode instances against ${first.prefill + first.decode} aggregated (${first.profile}); ` +
      `SLO: TTFT ≤ ${first.slo.ttftMs} ms and TPOT ≤ ${first.slo.tpotMs} ms.`,
  )
  for (const r of runs) {
    lines.push('')
    lines.push(`Load ×${r.load}: ${r.requests.toLocaleString('en-US')} requests in ${formatDuration(r.durationMs)} simulated (${(r.requests / (r.durationMs / 1000)).toFixed(2)} req/s).`)
    lines.push('')
    lines.push('| lane | fleet | P50 TTFT ms | P90 TTFT ms | P50 TPOT ms | P90 TPOT ms | goodput req/s (in SLO) | req/s | prefill legs | not computed | decode share |')
    lines.push('| --- | --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | :---: |')
    for (const l of r.lanes) {
      const fleet = l.aggregated ? `${r.prefill + r.decode} agg` : `${r.prefill}P+${r.decode}D`
      lines.push(
        `| ${l.lane} | ${fleet} | ${ms(l.ttftMs.p50)} | ${ms(l.ttftMs.p90)} | ${ms1(l.tpotMs.p50)} | ${ms1(l.tpotMs.p90)} | ${l.goodput.toFixed(2)} (${pct(l.goodShare)}) | ` +
          `${l.requestsPerSec.toFixed(2)} | ${pct(l.splitShare)} | ${pct(l.reuse)} | ${pct(l.shareMin)}–${pct(l.shareMax)} |`,
      )
    }
    const rejected = r.lanes[0]?.rejected ?? 0
    if (rejected > 0) lines.push('', `${rejected} request(s) exceeded the model's context and were rejected (counted in no column).`)
  }
  if (runs.length > 1) {
    lines.push('', 'Sweep: P90 TTFT / P90 TPOT ms by load:', '')
    lines.push(`| lane | ${runs.map((r) => `×${r.load}`).join(' | ')} |`)
    lines.push(`| --- | ${runs.map(() => '---:').join(' | ')} |`)
    first.lanes.forEach((l, i) => {
      lines.push(`| ${l.lane} | ${runs.map((r) => `${ms(r.lanes[i]!.ttftMs.p90)} / ${ms1(r.lanes[i]!.tpotMs.p90)}`).join(' | ')} |`)
    })
  }
  return `${lines.join('\n')}\n`
}
