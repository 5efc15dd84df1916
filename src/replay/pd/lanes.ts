// The lanes a disaggregated replay runs: ours (src/replay/pd/ours.ts), then the peers'
// disaggregated routers (src/replay/peers/*-pd.ts), by name.
import { OutOfRangeError } from '../../core/errors.js'
import { DEFAULT_PD_DECODE_PREFILL_CAP, DEFAULT_PD_THRESHOLD } from '../../config/disaggregation.js'
import { dynamoPd } from '../peers/dynamo-pd.js'
import { llmdPd } from '../peers/llmd-pd.js'
import { sglangPd } from '../peers/sglang-pd.js'
import { vllmPd } from '../peers/vllm-pd.js'
import { ourLanes } from './ours.js'
import type { PdRouterFactory } from './types.js'

export const PD_PEERS: readonly PdRouterFactory[] = [vllmPd, sglangPd, llmdPd, dynamoPd]

/** The default lanes: ours with the approximate view, then the peers. */
export function pdLanes(threshold = DEFAULT_PD_THRESHOLD, cap = DEFAULT_PD_DECODE_PREFILL_CAP): PdRouterFactory[] {
  return [...ourLanes(threshold, cap), ...PD_PEERS]
}

/** Every lane that can be named: the default ones and ours with the exact view (`…:events`). */
export function allPdLanes(threshold = DEFAULT_PD_THRESHOLD, cap = DEFAULT_PD_DECODE_PREFILL_CAP): PdRouterFactory[] {
  return [...ourLanes(threshold, cap), ...ourLanes(threshold, cap, 'exact'), ...PD_PEERS]
}

export function pdLaneNames(): string[] {
  return allPdLanes().map((f) => f.name)
}

/** Lanes by name (any case, - or _), all of them when none are named; a RangeError names an unknown one. */
export function resolvePdLanes(names: readonly string[] | undefined, threshold = DEFAULT_PD_THRESHOLD, cap = DEFAULT_PD_DECODE_PREFILL_CAP): PdRouterFactory[] {
  if (names === undefined || names.length === 0) return pdLanes(threshold, cap)
  const all = allPdLanes(threshold, cap)
  const out: PdRouterFactory[] = []
  for (const raw of names) {
    const n = raw.trim().toLowerCase().replace(/-/g, '_')
    const f = all.find((l) => l.name === n)
    if (f === undefined) throw new OutOfRangeError('strategy', `one of ${all.map((l) => l.name).join(', ')}`, raw, `unknown lane '${raw}' with --prefill/--decode; choose from ${all.map((l) => l.name).join(', ')}`)
    if (!out.includes(f)) out.push(f)
  }
  return out
}
