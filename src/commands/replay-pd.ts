// `prefix-router replay --prefill N --decode M`: the disaggregated replay. Each lane is a fleet of
// N prefill + M decode instances (ours with src/schedule's pd profile, and the peers' PD routers)
// or N + M aggregated ones, on the same requests; with --sweep, at several loads. Flags are
// checked here, the run is src/replay/pd/run.ts.
import { mkdir, writeFile } from 'node:fs/promises'
import { join } from 'node:path'
import { LIMITS } from '../core/options.js'
import { DEFAULT_PD_DECODE_PREFILL_CAP, DEFAULT_PD_THRESHOLD } from '../config/disaggregation.js'
import { requireFeatures } from '../core/optional-packages.js'
import { resolveSim, type SimOptions } from '../sim/config.js'
import { DEFAULT_PROFILE } from '../sim/profiles.js'
import { DEFAULT_TOKENIZER, type TokenizerName } from '../sim/tokenizers/index.js'
import { MIN_BLOCK_TOKENS } from '../replay/block-text.js'
import { DEFAULT_KV_EVENTS_DELAY_MS } from '../replay/lane.js'
import { pdLaneNames, resolvePdLanes } from '../replay/pd/lanes.js'
import { pdMarkdown } from '../replay/pd/report.js'
import { runPdReplay, sweepRequestsAsync, type PdReplayResult } from '../replay/pd/run.js'
import { DEFAULT_SLO } from '../replay/pd/stats.js'
import { Progress } from '../replay/progress.js'
import { checkTrace, readTrace, TraceError, type TraceFormat } from '../replay/trace.js'
import { resolveParams, type TimedRequest, type Workload } from '../replay/types.js'
import { CliError } from '../command-line/cli-error.js'
import { formatDuration } from '../replay/duration.js'
import { durationFlag, intFlag } from './replay-flags.js'

const str = { type: 'string' } as const

export const PD_FLAGS = {
  prefill: str,
  decode: str,
  sweep: str,
  'ttft-slo': str,
  'tpot-slo': str,
  'pd-threshold': str,
  'pd-decode-prefill-cap': str,
} as const

/** Instances of each role a disaggregated replay takes. */
export const MAX_ROLE_INSTANCES = 128
/** Without --duration, a workload's disaggregated replay simulates this long (every lane, every load point). */
export const PD_DEFAULT_DURATION_MS = 600_000
/** Load factors a sweep takes, and how many. */
const MAX_SWEEP_POINTS = 16
const MAX_LOAD = 64

export function pdHelp(): string {
  return `
disaggregated replay (prefill/decode, docs/replay.md "Disaggregated fleets"):
  --prefill N --decode M       N prefill + M decode instances (1 to ${MAX_ROLE_INSTANCES} each, both needed) beside N+M
                               aggregated ones; lanes: ${pdLaneNames().join(', ')} (--strategies picks some)
  --pd-threshold N             tokens the decode instance lacks below which the pd lane skips the
                               prefill leg (0 to 1048576; default ${DEFAULT_PD_THRESHOLD}, serve's default)
  --pd-decode-prefill-cap N    past the threshold, the pd lane still runs a request whole on its
                               decode instance when that is sooner and its queued prefill stays within
                               N tokens (0 to 1048576; default ${DEFAULT_PD_DECODE_PREFILL_CAP}, serve's; 0: the threshold alone)
  --ttft-slo D, --tpot-slo D   the SLO goodput counts (defaults ${DEFAULT_SLO.ttftMs}ms and ${DEFAULT_SLO.tpotMs}ms)
  --sweep LIST                 load factors, e.g. 0.5,1,2,4 (above 0, at most ${MAX_LOAD}; up to ${MAX_SWEEP_POINTS}): the same
                               requests with arrival times divided by each, one table per load
  A workload's disaggregated replay defaults to --duration ${formatDuration(PD_DEFAULT_DURATION_MS)}.`
}

export interface PdCliInput {
  workload: Workload | undefined
  tracePath: string | undefined
  knobs: Record<string, number>
  quiet: boolean
  /** The disaggregation flags given. */
  given: string[]
}

/** Flags of the aggregated replay that a disaggregated one does not take. */
const NOT_WITH_PD = ['instances', 'router-replicas', 'clients', 'add-instance-at', 'remove-instance-at', 'window', 'engine-load', 'engine-load-interval', 'share-load-interval', 'share-load-delay', 'concurrency-threshold']

export function parseSweep(raw: string): number[] {
  const parts = raw.split(',').map((s) => s.trim())
  const out: number[] = []
  for (const p of parts) {
    const v = p === '' ? NaN : Number(p)
    if (!Number.isFinite(v) || v <= 0 || v > MAX_LOAD) throw new CliError(`--sweep takes load factors above 0 and at most ${MAX_LOAD}, comma-separated (e.g. 0.5,1,2,4); got '${p}' in '${raw}'`)
    if (!out.includes(v)) out.push(v)
  }
  if (out.length > MAX_SWEEP_POINTS) throw new CliError(`--sweep takes at most ${MAX_SWEEP_POINTS} load factors; got ${out.length}`)
  return out.sort((a, b) => a - b)
}

export async function runPdFromCli(argv: string[], get: (k: string) => string | undefined, input: PdCliInput): Promise<number> {
  const rawP = get('prefill')
  const rawD = get('decode')
  if (rawP === undefined || rawD === undefined) {
    const has = rawP === undefined ? (rawD === undefined ? input.given[0]! : 'decode') : 'prefill'
    const missing = rawP === undefined ? 'prefill' : 'decode'
    throw new CliError(`--${has} needs --${missing}: a disaggregated replay takes both counts, e.g. --prefill 2 --decode 2`)
  }
  const prefill = intFlag('prefill', rawP, 1, MAX_ROLE_INSTANCES)
  const decode = intFlag('decode', rawD, 1, MAX_ROLE_INSTANCES)
  for (const k of NOT_WITH_PD) {
    if (get(k) !== undefined || argv.includes(`--${k}`)) {
      throw new CliError(
        k === 'instances'
          ? `--instances does not apply with --prefill/--decode: the aggregated lane has ${prefill + decode} instances (N + M)`
          : `--${k} does not apply with --prefill/--decode`,
      )
    }
  }
  if (get('trace-format') !== undefined && input.tracePath === undefined) throw new CliError('--trace-format needs --trace')
  const threshold = get('pd-threshold') === undefined ? DEFAULT_PD_THRESHOLD : intFlag('pd-threshold', get('pd-threshold')!, 0, 1 << 20)
  const cap = get('pd-decode-prefill-cap') === undefined ? DEFAULT_PD_DECODE_PREFILL_CAP : intFlag('pd-decode-prefill-cap', get('pd-decode-prefill-cap')!, 0, 1 << 20)
  const slo = {
    ttftMs: get('ttft-slo') === undefined ? DEFAULT_SLO.ttftMs : durationFlag('ttft-slo', get('ttft-slo')!),
    tpotMs: get('tpot-slo') === undefined ? DEFAULT_SLO.tpotMs : durationFlag('tpot-slo', get('tpot-slo')!),
  }
  const loads = get('sweep') === undefined ? [1] : parseSweep(get('sweep')!)
  let lanes
  try {
    lanes = resolvePdLanes(get('strategies')?.split(',').filter((s) => s.trim() !== ''), threshold, cap)
  } catch (err) {
    throw new CliError(`--strategies: ${(err as Error).message}`)
  }
  const seed = get('seed') === undefined ? 1 : intFlag('seed', get('seed')!, 0, 2 ** 31 - 1)
  const pl = LIMITS.prefixLength
  const prefixLength = get('prefix-length') === undefined ? pl.default : intFlag('prefix-length', get('prefix-length')!, pl.min, pl.max)
  const kvEventsDelayMs = get('kv-events-delay') === undefined ? DEFAULT_KV_EVENTS_DELAY_MS : durationFlag('kv-events-delay', get('kv-events-delay')!, false)
  const sim: SimOptions = { profile: get('profile') ?? DEFAULT_PROFILE, tokenizer: (get('tokenizer') ?? DEFAULT_TOKENIZER) as TokenizerName }
  const resolved = resolveSim(sim)
  requireFeatures(resolved.tokenizer === 'o200k' ? ['o200k'] : [])

  let durationMs: number
  let make: () => Iterable<TimedRequest> | AsyncIterable<TimedRequest>
  let source: string
  if (input.tracePath !== undefined) {
    const tf = get('trace-format') ?? 'openai'
    const format: TraceFormat =
      tf === 'openai'
        ? { kind: 'openai' }
        : { kind: 'hash-ids', blockTokens: get('trace-block-tokens') === undefined ? 512 : intFlag('trace-block-tokens', get('trace-block-tokens')!, MIN_BLOCK_TOKENS, 65_536), tokenizer: resolved.tokenizer }
    let summary
    try {
      summary = await checkTrace(input.tracePath, format)
    } catch (err) {
      if (err instanceof TraceError) throw new CliError(`--trace ${err.message}`)
      const e = err as NodeJS.ErrnoException
      if (e.code === 'ENOENT' || e.code === 'EISDIR' || e.code === 'EACCES') throw new CliError(`--trace cannot read '${input.tracePath}': ${e.message}`)
      throw err
    }
    durationMs = get('duration') === undefined ? summary.spanMs + 1 : durationFlag('duration', get('duration')!)
    const path = input.tracePath
    make = () => readTrace(path, format)
    source = `trace ${path}`
  } else {
    const w = input.workload!
    const params = resolveParams(w, input.knobs)
    durationMs = get('duration') === undefined ? PD_DEFAULT_DURATION_MS : durationFlag('duration', get('duration')!)
    const d = durationMs
    make = () => w.generate(params, { seed, durationMs: d })
    source = `${w.name} (${Object.entries(params).map(([k, v]) => `${k} ${v}`).join(', ')})`
  }

  const runs: PdReplayResult[] = []
  const started = performance.now()
  for (const load of loads) {
    const span = durationMs / load
    const progress = input.quiet ? null : new Progress(process.stderr, span, loads.length > 1 ? `replay ×${load}` : 'replay')
    runs.push(
      await runPdReplay({
        requests: load === 1 ? make() : sweepRequestsAsync(make(), load),
        lanes,
        prefill,
        decode,
        durationMs: span,
        sim,
        prefixLength,
        seed,
        slo,
        kvEventsDelayMs,
        load,
        ...(progress === null ? {} : { onProgress: (t: number, n: number) => progress.update(t, n) }),
      }),
    )
    progress?.done()
  }
  process.stdout.write(pdMarkdown(runs, source))
  const outDir = get('out') ?? 'replay-results'
  await mkdir(outDir, { recursive: true })
  await writeFile(join(outDir, 'pd-replay.json'), `${JSON.stringify({ command: ['prefix-router', 'replay', ...argv].join(' '), source, runs }, null, 2)}\n`)
  if (!input.quiet) {
    process.stderr.write(`replay: ${runs.length} load(s) × ${lanes.length} lanes in ${((performance.now() - started) / 1000).toFixed(1)} s; wrote ${join(outDir, 'pd-replay.json')}\n`)
  }
  return 0
}
