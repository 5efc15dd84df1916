// `prefix-router replay`: runs a generated workload or a JSONL trace through the
// simulator's virtual engine once per strategy and reports TTFT, hit rates, throughput,
// balance and overflow (README, "Replay"). Parsing and checks live here; the run is
// src/replay/run.ts.
import { mkdir, writeFile } from 'node:fs/promises'
import { join } from 'node:path'
import { LIMITS } from '../core/options.js'
import { resolveSim, type SimOptions } from '../sim/config.js'
import { PROFILES, DEFAULT_PROFILE } from '../sim/profiles.js'
import { DEFAULT_TOKENIZER, isTokenizerName, TOKENIZERS } from '../sim/tokenizers/index.js'
import { CHARTS, renderSvg } from '../replay/charts.js'
import { requireFeatures } from '../core/optional-packages.js'
import { formatDuration, parseDuration } from '../replay/duration.js'
import { DEFAULT_ENGINE_LOAD_INTERVAL_MS, DEFAULT_KV_EVENTS_DELAY_MS, DEFAULT_SHARE_LOAD_DELAY_MS, DEFAULT_SHARE_LOAD_INTERVAL_MS, type ScaleEvent } from '../replay/lane.js'
import { Progress } from '../replay/progress.js'
import { jsonReport, markdownReport } from '../replay/report.js'
import { runReplay } from '../replay/run.js'
import { defaultStrategyNames, resolveStrategies, strategyNames } from '../replay/strategies.js'
import { MIN_BLOCK_TOKENS } from '../replay/block-text.js'
import { checkTrace, readTrace, TraceError, type TraceFormat } from '../replay/trace.js'
import { describeParam, resolveParams, type WorkloadParam } from '../replay/types.js'
import { WORKLOADS } from '../replay/workloads/index.js'
import { CliError } from '../command-line/cli-error.js'
import { parseFlags } from '../command-line/parse-flags.js'
import { runPdFromCli, PD_FLAGS, pdHelp } from './replay-pd.js'
import { durationFlag, intFlag } from './replay-flags.js'

const KNOBS = new Map<string, WorkloadParam>()
for (const w of Object.values(WORKLOADS)) for (const p of w.params) if (!KNOBS.has(p.flag)) KNOBS.set(p.flag, p)

function help(): string {
  const workloads = Object.values(WORKLOADS).map((w) => {
    const knobs = w.params.map((p) => `      --${p.flag.padEnd(19)} ${p.description} (default ${p.default})`)
    return `  ${w.name}: ${w.summary}\n${knobs.join('\n')}`
  })
  return `usage: prefix-router replay [--workload NAME | --trace FILE] [options]

Replays requests through the simulator's virtual-time fleet once per strategy and prints
a Markdown table; writes replay.json and SVG charts to --out. See docs/replay.md.

  --workload NAME              ${Object.keys(WORKLOADS).join(' | ')} (default long-context)
  --trace FILE                 a JSONL trace, one request a line, timestamps not decreasing (ties allowed)
  --trace-format F             openai: OpenAI request bodies with "timestamp" (ms or ISO 8601) (default)
                               hash-ids: "timestamp" (ms), "input_length", "output_length", "hash_ids"
                               (Mooncake's format). Each id becomes a block of words exactly
                               --trace-block-tokens tokens long under --tokenizer: under o200k the
                               engine's blocks do not line up with the router's 64-byte ones
  --trace-block-tokens N       hash-ids: tokens per hash id (${MIN_BLOCK_TOKENS} to ${MAX_TRACE_BLOCK_TOKENS}; default 512)
  --instances N                instances at the start (1 to 256; default 7)
  --duration D                 simulated time: 1h, 30m, 90s, 500ms (default 1h; a trace: all of it;
                               cache-pressure: its steps)
  --strategies LIST            comma-separated, default: ${defaultStrategyNames().join(', ')};
                               fed by the engines' KV events, when named (and by default with
                               --router-replicas): ${strategyNames().filter((n) => !defaultStrategyNames().includes(n)).join(', ')}
  --kv-events-delay D          simulated delay of the engines' KV events to the event-fed lanes
                               (default ${DEFAULT_KV_EVENTS_DELAY_MS}ms; 0 delivers them at the end of the step that made them)
  --engine-load MODE           auto | on | off, as serve's: auto (default) weighs the engines' load in
                               longest_prefix; on also in least_outstanding_requests and prefix_aware's
                               threshold (every client's requests at the instance); off: never read
  --engine-load-interval D     how often each router replica reads the engines' running and waiting
                               requests, for our strategies (serve scrapes /metrics so; default
                               ${DEFAULT_ENGINE_LOAD_INTERVAL_MS}ms; 0: never, each router counts only its own requests)
  --profile NAME               ${Object.keys(PROFILES).join(' | ')} (default ${DEFAULT_PROFILE})
  --tokenizer NAME             ${TOKENIZERS.join(' | ')}: how the simulator counts and blocks prompt tokens (default ${DEFAULT_TOKENIZER})
  --seed N                     seed of the workload and of the peers' tie-breaks (default 1)
  --out DIR                    where replay.json and the charts go (default replay-results)
  --router-replicas K          K router replicas per strategy, requests dealt round-robin (1 to 64;
                               default 1); each strategy also runs with one router, side by side
  --share-load-interval D      with replicas: how often longest_prefix:shared's replicas publish their
                               queued prefill to each other (serve --share-load; default ${DEFAULT_SHARE_LOAD_INTERVAL_MS}ms; 0: never)
  --share-load-delay D         how long a publication takes to reach the other replicas (default ${DEFAULT_SHARE_LOAD_DELAY_MS}ms)
  --clients N                  closed loop: N clients, each sending the next request when its last one
                               has finished (timestamps ignored; 1 to 100000; no scale events; a trace's
                               clients stop when it runs out)
  --prefix-length N            routing prefix, code points (${LIMITS.prefixLength.min} to ${LIMITS.prefixLength.max}; default ${LIMITS.prefixLength.default})
  --concurrency-threshold N    in-flight requests before overflow (${LIMITS.concurrencyThreshold.min} to ${LIMITS.concurrencyThreshold.max}); default
                               each strategy's own: ${LIMITS.concurrencyThreshold.default}, none for longest_prefix
  --add-instance-at T          add an instance at simulated time T (repeatable)
  --remove-instance-at T       remove the most recently added instance at T (repeatable)
  --window D                   window of the moved-share and recovery measurements (default 60s)
  --quiet                      no progress on stderr
${pdHelp()}

workloads and their knobs:
${workloads.join('\n')}
`
}

const MAX_TRACE_BLOCK_TOKENS = 65_536

export async function run(argv: string[]): Promise<number> {
  const str = { type: 'string' } as const
  const knobOptions = Object.fromEntries([...KNOBS.keys()].map((k) => [k, str]))
  const { values } = parseFlags(argv, {
    workload: str,
    trace: str,
    'trace-format': str,
    'trace-block-tokens': str,
    instances: str,
    duration: str,
    strategies: str,
    profile: str,
    tokenizer: str,
    seed: str,
    out: str,
    'router-replicas': str,
    clients: str,
    'prefix-length': str,
    'concurrency-threshold': str,
    'add-instance-at': { type: 'string', multiple: true },
    'remove-instance-at': { type: 'string', multiple: true },
    window: str,
    'kv-events-delay': str,
    'engine-load-interval': str,
    'engine-load': str,
    'share-load-interval': str,
    'share-load-delay': str,
    quiet: { type: 'boolean' },
    help: { type: 'boolean', short: 'h' },
    ...PD_FLAGS,
    ...knobOptions,
  })
  const v = values as Record<string, string | string[] | boolean | undefined>
  if (v.help === true) {
    process.stdout.write(help())
    return 0
  }
  const get = (k: string): string | undefined => (typeof v[k] === 'string' ? (v[k] as string) : undefined)

  const tracePath = get('trace')
  if (tracePath !== undefined && get('workload') !== undefined) throw new CliError('give --workload or --trace, not both')
  const workloadName = get('workload') ?? 'long-context'
  const workload = tracePath === undefined ? WORKLOADS[workloadName] : undefined
  if (tracePath === undefined && workload === undefined) {
    throw new CliError(`--workload must be one of ${Object.keys(WORKLOADS).join(', ')}; got '${workloadName}'`)
  }
  const knobs: Record<string, number> = {}
  for (const [flag, p] of KNOBS) {
    const raw = get(flag)
    if (raw === undefined) continue
    if (workload === undefined || !workload.params.some((q) => q.flag === flag)) {
      throw new CliError(`--${flag} does not apply to ${workload === undefined ? '--trace' : `--workload ${workload.name}`}`)
    }
    const n = raw.trim() === '' ? NaN : Number(raw)
    const own = workload.params.find((q) => q.flag === flag) ?? p
    if (!Number.isFinite(n) || n < own.min || n > own.max || (own.integer && !Number.isInteger(n))) {
      throw new CliError(`--${flag} must be ${describeParam(own)}; got '${raw}'`)
    }
    knobs[flag] = n
  }

  const instances = get('instances') === undefined ? 7 : intFlag('instances', get('instances')!, 1, 256)
  const seed = get('seed') === undefined ? 1 : intFlag('seed', get('seed')!, 0, 2 ** 31 - 1)
  const replicas = get('router-replicas') === undefined ? 1 : intFlag('router-replicas', get('router-replicas')!, 1, 64)
  const clients = get('clients') === undefined ? undefined : intFlag('clients', get('clients')!, 1, 100_000)
  const pl = LIMITS.prefixLength
  const prefixLength = get('prefix-length') === undefined ? pl.default : intFlag('prefix-length', get('prefix-length')!, pl.min, pl.max)
  const ct = LIMITS.concurrencyThreshold
  const threshold =
    get('concurrency-threshold') === undefined ? undefined : intFlag('concurrency-threshold', get('concurrency-threshold')!, ct.min, ct.max)
  const profile = get('profile') ?? DEFAULT_PROFILE
  if (PROFILES[profile.toLowerCase()] === undefined) throw new CliError(`--profile must be one of ${Object.keys(PROFILES).join(', ')}; got '${profile}'`)
  const tokenizer = get('tokenizer') ?? DEFAULT_TOKENIZER
  if (!isTokenizerName(tokenizer)) throw new CliError(`--tokenizer must be one of ${TOKENIZERS.join(', ')}; got '${tokenizer}'`)
  const engineLoadMode = get('engine-load') ?? 'auto'
  if (!['auto', 'on', 'off'].includes(engineLoadMode)) throw new CliError(`--engine-load: must be auto, on or off; got '${engineLoadMode}'`)
  // Disaggregated fleets are a run of their own (src/commands/replay-pd.ts).
  const pd = ['prefill', 'decode', 'sweep', 'ttft-slo', 'tpot-slo', 'pd-threshold', 'pd-decode-prefill-cap'].filter((k) => get(k) !== undefined)
  if (pd.length > 0) return runPdFromCli(argv, get, { workload, tracePath, knobs, quiet: v.quiet === true, given: pd })
  let strategies
  try {
    strategies = resolveStrategies(get('strategies')?.split(',').filter((s) => s.trim() !== ''), replicas, { engineLoadAll: engineLoadMode === 'on' })
  } catch (err) {
    throw new CliError(`--strategies: ${(err as Error).message}`)
  }
  const windowMs = get('window') === undefined ? 60_000 : durationFlag('window', get('window')!)
  const kvEventsDelayMs = get('kv-events-delay') === undefined ? DEFAULT_KV_EVENTS_DELAY_MS : durationFlag('kv-events-delay', get('kv-events-delay')!, false)
  const engineLoadIntervalMs =
    engineLoadMode === 'off' ? 0 : get('engine-load-interval') === undefined ? DEFAULT_ENGINE_LOAD_INTERVAL_MS : durationFlag('engine-load-interval', get('engine-load-interval')!, false)
  const shareLoadIntervalMs = get('share-load-interval') === undefined ? DEFAULT_SHARE_LOAD_INTERVAL_MS : durationFlag('share-load-interval', get('share-load-interval')!, false)
  const shareLoadDelayMs = get('share-load-delay') === undefined ? DEFAULT_SHARE_LOAD_DELAY_MS : durationFlag('share-load-delay', get('share-load-delay')!, false)
  const events: ScaleEvent[] = []
  for (const [flag, kind] of [['add-instance-at', 'add'], ['remove-instance-at', 'remove']] as const) {
    const list = v[flag]
    for (const raw of Array.isArray(list) ? list : []) events.push({ atMs: durationFlag(flag, raw, false), kind })
  }
  const sim: SimOptions = { profile, tokenizer }
  const traceFormat = get('trace-format') ?? 'openai'
  if (traceFormat !== 'openai' && traceFormat !== 'hash-ids') throw new CliError(`--trace-format must be openai or hash-ids; got '${traceFormat}'`)
  if (get('trace-format') !== undefined && tracePath === undefined) throw new CliError('--trace-format needs --trace')
  const rawBlockTokens = get('trace-block-tokens')
  if (rawBlockTokens !== undefined && traceFormat !== 'hash-ids') throw new CliError('--trace-block-tokens applies to --trace-format hash-ids only')
  const format: TraceFormat =
    traceFormat === 'openai'
      ? { kind: 'openai' }
      : {
          kind: 'hash-ids',
          blockTokens: rawBlockTokens === undefined ? 512 : intFlag('trace-block-tokens', rawBlockTokens, MIN_BLOCK_TOKENS, MAX_TRACE_BLOCK_TOKENS),
          tokenizer: resolveSim(sim).tokenizer,
        }
  if (clients !== undefined && events.length > 0) throw new CliError('--clients cannot be combined with --add-instance-at or --remove-instance-at')
  const removals = events.filter((e) => e.kind === 'remove').length
  if (removals >= instances + events.length - removals) throw new CliError('--remove-instance-at would leave no instance')

  // The charts are written after the run: their packages are looked for before it, not after
  // minutes of it, with the tokenizer's.
  requireFeatures(tokenizer === 'o200k' ? ['charts', 'o200k'] : ['charts'])
  const quiet = v.quiet === true
  let durationMs: number
  let requests
  let source
  let phases
  let notes
  if (tracePath !== undefined) {
    let summary
    try {
      summary = await checkTrace(tracePath, format)
    } catch (err) {
      if (err instanceof TraceError) throw new CliError(`--trace ${err.message}`)
      const e = err as NodeJS.ErrnoException
      if (e.code === 'ENOENT' || e.code === 'EISDIR' || e.code === 'EACCES') throw new CliError(`--trace cannot read '${tracePath}': ${e.message}`)
      throw err
    }
    durationMs = get('duration') === undefined ? summary.spanMs + 1 : durationFlag('duration', get('duration')!)
    requests = readTrace(tracePath, format)
    source = { trace: tracePath }
  } else {
    const params = resolveParams(workload!, knobs)
    durationMs = get('duration') === undefined ? (workload!.durationMs?.(params) ?? 3_600_000) : durationFlag('duration', get('duration')!)
    phases = workload!.phases?.(params, durationMs)
    const rs = resolveSim(sim)
    const e = rs.engine
    notes = workload!.sizing?.(params, { instances, kvBlocks: e.kvBlocks, blockSize: e.blockSize, maxNumSeqs: e.maxNumSeqs, decodeStepMs: rs.profile.latency.stepBaseMs })
    // Closed loop draws as many requests as the fastest lane sends: a generator that runs on
    // well past the duration (it is lazy, so only what is drawn is made).
    requests = workload!.generate(params, { seed, durationMs: clients === undefined ? durationMs : durationMs * 1000 })
    source = { workload: workload!.name, params }
  }
  for (const e of events) {
    if (e.atMs >= durationMs) throw new CliError(`--${e.kind === 'add' ? 'add' : 'remove'}-instance-at ${formatDuration(e.atMs)} is not within --duration ${formatDuration(durationMs)}`)
  }

  const outDir = get('out') ?? 'replay-results'
  const progress = quiet ? null : new Progress(process.stderr, durationMs, 'replay')
  const result = await runReplay({
    requests,
    source,
    strategies,
    instances,
    durationMs,
    sim,
    prefixLength,
    concurrencyThreshold: threshold,
    routerReplicas: replicas,
    ...(clients !== undefined && { clients }),
    seed,
    events,
    windowMs,
    kvEventsDelayMs,
    engineLoadIntervalMs,
    shareLoadIntervalMs,
    shareLoadDelayMs,
    ...(phases !== undefined && { phases }),
    ...(notes !== undefined && { notes }),
    ...(progress === null ? {} : { onProgress: (t: number, n: number) => progress.update(t, n) }),
  })
  progress?.done()

  const command = ['prefix-router', 'replay', ...argv].join(' ')
  process.stdout.write(markdownReport(result))
  await mkdir(outDir, { recursive: true })
  await writeFile(join(outDir, 'replay.json'), jsonReport(result, command))
  for (const [file, spec] of Object.entries(CHARTS)) await writeFile(join(outDir, file), await renderSvg(spec(result)))
  if (!quiet) {
    process.stderr.write(
      `replay: ${result.requests.toLocaleString('en-US')} requests × ${result.strategies.length} strategies in ${(result.wallMs / 1000).toFixed(1)} s; ` +
        `wrote ${join(outDir, 'replay.json')} and ${Object.keys(CHARTS).length} charts\n`,
    )
  }
  return 0
}
