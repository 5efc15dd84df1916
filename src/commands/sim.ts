import { OutOfRangeError } from '../core/errors.js'
import { ROLES, type Role } from '../config/disaggregation.js'
import { requireFeatures } from '../core/optional-packages.js'
import { KvBindError } from '../sim/kv-bind-error.js'
import { outliveClosedPipes } from '../command-line/closed-pipes.js'
import { SGLANG_BOOTSTRAP_PORT } from '../sim/bootstrap.js'
import { checkLimit, describeLimit, type LimitName } from '../sim/config.js'
import { KV_LOAD_FAILURE_POLICIES, type KvLoadFailurePolicy } from '../sim/kv-transfer.js'
import { parseFaults } from '../sim/faults.js'
import type { SimKvEventsOptions } from '../sim/http-worker.js'
import { ApiError } from '../sim/openai-shapes.js'
import { PROFILES, DEFAULT_PROFILE } from '../sim/profiles.js'
import { DEFAULT_TOKENIZER, isTokenizerName, TOKENIZERS } from '../sim/tokenizers/index.js'
import { CliError } from '../command-line/cli-error.js'
import { parseFlags } from '../command-line/parse-flags.js'

const HELP = `usage: prefix-router sim [options]

Runs simulated vLLM workers (OpenAI API, prefix cache, continuous batching, vLLM metrics)
on ports PORT..PORT+N-1 until SIGINT or SIGTERM. Prints one URL per worker.

  --instances N               workers (${describeLimit('instances')}; default 1)
  --port P                    first port (${describeLimit('port')}; default 8000; 0 = any free ports)
  --host H                    address to listen on (default 127.0.0.1)
  --h2c                       also serve HTTP/2 without TLS (prior knowledge) on the same ports
  --profile NAME              ${Object.keys(PROFILES).join(' | ')} (default ${DEFAULT_PROFILE})
  --model NAME                served model name (default: the profile's)
  --lora NAME[=PATH]          a LoRA adapter to serve (repeatable)
  --kv-blocks N               KV cache blocks per worker (${describeLimit('kvBlocks')})
  --block-size N              tokens per block (${describeLimit('blockSize')}; default 16)
  --max-num-seqs N            running sequences per step (${describeLimit('maxNumSeqs')})
  --max-num-batched-tokens N  token budget per step (${describeLimit('maxNumBatchedTokens')})
  --max-model-len N           longest prompt + output (${describeLimit('maxModelLen')})
  --output-tokens N           output length when a request sets no max_tokens (${describeLimit('outputTokens')})
  --time-scale X              simulated time runs X times faster (${describeLimit('timeScale')}; default 1)
  --tokenizer NAME            ${TOKENIZERS.join(' | ')}: how prompt text becomes tokens (default ${DEFAULT_TOKENIZER};
                              bytes = 4 bytes of UTF-8 a token, o200k = OpenAI's o200k_base BPE)
  --api-key KEY               as vLLM's --api-key: /v1/* answers 401 without Authorization: Bearer KEY

prefill/decode disaggregation (see docs/simulator.md, "Prefill and decode roles"):
  --role R                    prefill | decode | both (default both): labels, ids (prefill-i, decode-i, sim-i)
                              and defaults; every role serves whole requests and both vLLM legs (kv_both)
  --side-channel-port P       KV side channel (vLLM's VLLM_NIXL_SIDE_CHANNEL_PORT), worker i on P + i
                              (${describeLimit('port')}; default 0 = free ports)
  --bootstrap-port P          SGLang bootstrap server, worker i on P + i (prefill: default ${SGLANG_BOOTSTRAP_PORT};
                              both: default free ports; decode workers run none)
  --kv-lease-ms N             held blocks no decode asked for are freed after N ms (${describeLimit('kvLeaseMs')}; default 30000)
  --kv-load-failure-policy P  fail | recompute: a decode whose KV cannot be read fails (500) or prefills (default fail)
  --kv-link-gb-per-sec X      KV transfer bandwidth, GB/s (${describeLimit('kvLinkGbPerSec')}; default: the profile's)
  --kv-transfer-latency-ms X  fixed cost per KV transfer (${describeLimit('kvTransferLatencyMs')}; default: the profile's)
  --bootstrap-timeout-ms N    an SGLang room waits N ms for its other leg (${describeLimit('bootstrapTimeoutMs')}; default 300000)

KV-cache events (vLLM's --kv-events-config: ZeroMQ PUB, msgpack batches; see docs/simulator.md):
  --kv-events-port P          publish each worker's cache events, worker i on P + i (${describeLimit('port')}; 0 = free ports)
  --kv-events-replay-port R   answer replay requests (ROUTER), worker i on R + i
  --kv-events-encoding E      map | array: vLLM's current struct encoding or the older tagged arrays (default map)
  --kv-events-topic T         topic frame of every message (default empty)
  --kv-events-replay-framing F
                              topic | legacy: replay answers ["", topic, seq, payload] as vLLM 0.26.0
                              on sends them, or ["", seq, payload] as older vLLM did (default topic)

faults (also settable at run time with POST /sim/faults on a worker; POST /sim/restart restarts
its engine: cache emptied, requests aborted, KV-event sequence back to 0):
  --fault-error-rate R        share of requests answered with an error (0 to 1)
  --fault-error-status S      500 or 503 (default 500)
  --fault-health-fail         /health and /ping answer 503
  --fault-drop-after-tokens K close the connection after K tokens
  --fault-hang-rate R         share of requests never answered (0 to 1)
  --fault-delay-ms MS         simulated milliseconds added before scheduling
  --fault-kv-drop-rate R      share of KV-event batches not sent live (0 to 1; still replayable)
  --fault-kv-delay-ms MS      wall milliseconds every KV-event batch is held back
  --fault-seed N              seed of the fault draws
  --fault-instances LIST      comma-separated worker indexes the faults apply to (default all)
`

const NUMBER_FLAGS: [flag: string, limit: LimitName][] = [
  ['instances', 'instances'],
  ['port', 'port'],
  ['kv-blocks', 'kvBlocks'],
  ['block-size', 'blockSize'],
  ['max-num-seqs', 'maxNumSeqs'],
  ['max-num-batched-tokens', 'maxNumBatchedTokens'],
  ['max-model-len', 'maxModelLen'],
  ['output-tokens', 'outputTokens'],
  ['time-scale', 'timeScale'],
  ['kv-lease-ms', 'kvLeaseMs'],
  ['kv-link-gb-per-sec', 'kvLinkGbPerSec'],
  ['kv-transfer-latency-ms', 'kvTransferLatencyMs'],
  ['bootstrap-timeout-ms', 'bootstrapTimeoutMs'],
  ['side-channel-port', 'port'],
  ['bootstrap-port', 'port'],
]

const FAULT_FLAGS = ['error-rate', 'error-status', 'drop-after-tokens', 'hang-rate', 'delay-ms', 'kv-drop-rate', 'kv-delay-ms', 'seed'] as const

function numberFlag(flag: string, limit: LimitName, raw: string): number {
  const v = raw.trim() === '' ? NaN : Number(raw)
  try {
    return checkLimit(limit, v, `--${flag}`)
  } catch (err) {
    if (err instanceof OutOfRangeError) throw new CliError(`--${flag} must be ${describeLimit(limit)}; got '${raw}'`)
    throw err
  }
}

/** The --kv-events-* flags as the fleet's kvEvents option; undefined without --kv-events-port. */
function kvEventsFlags(values: Record<string, unknown>, instances: number): SimKvEventsOptions | undefined {
  const str = (k: string): string | undefined => values[k] as string | undefined
  const port = str('kv-events-port')
  if (port === undefined) {
    for (const k of ['kv-events-replay-port', 'kv-events-encoding', 'kv-events-topic', 'kv-events-replay-framing']) {
      if (str(k) !== undefined) throw new CliError(`--${k} needs --kv-events-port`)
    }
    return undefined
  }
  const p = numberFlag('kv-events-port', 'port', port)
  if (p > 0 && p + instances - 1 > 65535) throw new CliError(`--kv-events-port + --instances - 1 must be at most 65535; got ${p + instances - 1}`)
  const out: SimKvEventsOptions = { port: p }
  const replay = str('kv-events-replay-port')
  if (replay !== undefined) {
    const r = numberFlag('kv-events-replay-port', 'port', replay)
    if (r > 0 && r + instances - 1 > 65535) {
      throw new CliError(`--kv-events-replay-port + --instances - 1 must be at most 65535; got ${r + instances - 1}`)
    }
    if (r > 0 && p > 0 && r < p + instances && p < r + instances) {
      throw new CliError(`--kv-events-replay-port ${r} overlaps the publish ports ${p}..${p + instances - 1}`)
    }
    out.replayPort = r
  }
  const enc = str('kv-events-encoding')
  if (enc !== undefined) {
    if (enc !== 'map' && enc !== 'array') throw new CliError(`--kv-events-encoding must be map or array; got '${enc}'`)
    out.encoding = enc
  }
  const topic = str('kv-events-topic')
  if (topic !== undefined) out.topic = topic
  const framing = str('kv-events-replay-framing')
  if (framing !== undefined) {
    if (framing !== 'topic' && framing !== 'legacy') throw new CliError(`--kv-events-replay-framing must be topic or legacy; got '${framing}'`)
    if (replay === undefined) throw new CliError('--kv-events-replay-framing needs --kv-events-replay-port')
    out.replayFraming = framing
  }
  return out
}

const LISTEN_WHY: Record<string, string> = {
  EADDRINUSE: 'address already in use',
  EACCES: 'permission denied (ports below 1024 need privileges)',
  EADDRNOTAVAIL: 'no such address on this machine',
}

/** The KV-event socket that did not bind, as the user asked for it: its endpoint, worker, socket and flag. */
function kvSocketOf(err: KvBindError, kv: SimKvEventsOptions): string {
  const [flag, base] = err.socket === 'pub' ? ['--kv-events-port', kv.port] : ['--kv-events-replay-port', kv.replayPort ?? 0]
  // Worker i publishes on the flag's port + i; 0 (any free port) cannot clash.
  const i = base === 0 ? 0 : err.port - base
  return `${err.endpoint} (worker ${i}'s KV events ${err.socket === 'pub' ? 'PUB' : 'replay'} socket, ${i === 0 ? flag : `${flag} ${base} + ${i}`})`
}

/** Ports a flag's workers take: P..P+N-1 (none for 0, free ports). */
interface PortRange {
  flag: string
  first: number
}

/** Refuses two flags whose port ranges share a port, naming both and the port. */
function checkPortClashes(ranges: PortRange[], instances: number): void {
  const used = ranges.filter((r) => r.first > 0)
  for (const r of used) {
    if (r.first + instances - 1 > 65535) throw new CliError(`--${r.flag} + --instances - 1 must be at most 65535; got ${r.first + instances - 1}`)
  }
  for (let i = 0; i < used.length; i++) {
    for (let j = i + 1; j < used.length; j++) {
      const a = used[i]!
      const b = used[j]!
      const lo = Math.max(a.first, b.first)
      if (lo <= Math.min(a.first, b.first) + instances - 1) {
        throw new CliError(
          `--${b.flag} ${b.first}..${b.first + instances - 1} and --${a.flag} ${a.first}..${a.first + instances - 1} both take port ${lo}`,
        )
      }
    }
  }
}

export async function run(argv: string[]): Promise<number> {
  const str = { type: 'string' } as const
  const { values } = parseFlags(argv, {
    instances: str,
    port: str,
    host: str,
    h2c: { type: 'boolean' },
    profile: str,
    model: str,
    lora: { type: 'string', multiple: true },
    'kv-blocks': str,
    'block-size': str,
    'max-num-seqs': str,
    'max-num-batched-tokens': str,
    'max-model-len': str,
    'output-tokens': str,
    'time-scale': str,
    tokenizer: str,
    'api-key': str,
    role: str,
    'side-channel-port': str,
    'bootstrap-port': str,
    'kv-lease-ms': str,
    'kv-load-failure-policy': str,
    'kv-link-gb-per-sec': str,
    'kv-transfer-latency-ms': str,
    'bootstrap-timeout-ms': str,
    'kv-events-port': str,
    'kv-events-replay-port': str,
    'kv-events-encoding': str,
    'kv-events-topic': str,
    'kv-events-replay-framing': str,
    'fault-error-rate': str,
    'fault-error-status': str,
    'fault-health-fail': { type: 'boolean' },
    'fault-drop-after-tokens': str,
    'fault-hang-rate': str,
    'fault-delay-ms': str,
    'fault-kv-drop-rate': str,
    'fault-kv-delay-ms': str,
    'fault-seed': str,
    'fault-instances': str,
    help: { type: 'boolean', short: 'h' },
  })
  if (values.help) {
    process.stdout.write(HELP)
    return 0
  }
  outliveClosedPipes()
  const nums: Partial<Record<LimitName, number>> = {}
  const flagNums: Record<string, number> = {}
  for (const [flag, limit] of NUMBER_FLAGS) {
    const raw = values[flag as keyof typeof values]
    if (typeof raw !== 'string') continue
    const v = numberFlag(flag, limit, raw)
    flagNums[flag] = v
    if (flag !== 'side-channel-port' && flag !== 'bootstrap-port') nums[limit] = v
  }
  const role = (values.role ?? 'both') as Role
  if (!(ROLES as readonly string[]).includes(role)) throw new CliError(`--role must be one of ${ROLES.join(', ')}; got '${values.role}'`)
  const policy = values['kv-load-failure-policy']
  if (policy !== undefined && !(KV_LOAD_FAILURE_POLICIES as readonly string[]).includes(policy)) {
    throw new CliError(`--kv-load-failure-policy must be one of ${KV_LOAD_FAILURE_POLICIES.join(', ')}; got '${policy}'`)
  }
  if (role === 'decode' && flagNums['bootstrap-port'] !== undefined) {
    throw new CliError('--bootstrap-port is for --role prefill or both: decode workers register with the prefill worker\'s bootstrap server')
  }
  const sidePort = flagNums['side-channel-port'] ?? 0
  const bootPort = flagNums['bootstrap-port'] ?? (role === 'prefill' ? SGLANG_BOOTSTRAP_PORT : role === 'both' ? 0 : null)
  const instances = nums.instances ?? 1
  const port = nums.port ?? 8000
  if (port > 0 && port + instances - 1 > 65535) {
    throw new CliError(`--port + --instances - 1 must be at most 65535; got ${port + instances - 1}`)
  }
  if (values.profile !== undefined && PROFILES[values.profile.toLowerCase()] === undefined) {
    throw new CliError(`--profile must be one of ${Object.keys(PROFILES).join(', ')}; got '${values.profile}'`)
  }
  if (values.model !== undefined && values.model.trim() === '') throw new CliError('--model must be a non-empty name')
  const tokenizer = values.tokenizer ?? DEFAULT_TOKENIZER
  if (!isTokenizerName(tokenizer)) throw new CliError(`--tokenizer must be one of ${TOKENIZERS.join(', ')}; got '${tokenizer}'`)
  if (values['api-key'] !== undefined && values['api-key'].trim() === '') throw new CliError('--api-key must be a non-empty key')
  for (const l of values.lora ?? []) {
    if (l === '' || l.startsWith('=') || l.endsWith('=')) throw new CliError(`--lora must be NAME or NAME=PATH; got '${l}'`)
  }

  const faultBody: Record<string, unknown> = {}
  for (const f of FAULT_FLAGS) {
    const raw = values[`fault-${f}`]
    if (raw !== undefined) faultBody[f.replace(/-/g, '_')] = raw.trim() === '' ? NaN : Number(raw)
  }
  if (values['fault-health-fail']) faultBody.health_fail = true
  let faults
  try {
    faults = parseFaults(faultBody).faults
  } catch (err) {
    if (err instanceof ApiError && err.param !== null) {
      const flag = `--fault-${err.param.replace(/_/g, '-')}`
      throw new CliError(err.message.replace(err.param, flag).replace(/; got .*$/, `; got '${String(values[flag.slice(2) as keyof typeof values])}'`))
    }
    throw err
  }
  let faultInstances: number[] | undefined
  if (values['fault-instances'] !== undefined) {
    faultInstances = values['fault-instances'].split(',').map((s) => {
      const i = Number(s)
      if (s.trim() === '' || !Number.isInteger(i) || i < 0 || i >= instances) {
        throw new CliError(`--fault-instances must list worker indexes from 0 to ${instances - 1}; got '${values['fault-instances']}'`)
      }
      return i
    })
  }

  const kvEvents = kvEventsFlags(values, instances)
  const ranges: PortRange[] = [
      { flag: 'port', first: port },
      { flag: 'side-channel-port', first: sidePort },
      ...(bootPort !== null ? [{ flag: 'bootstrap-port', first: bootPort }] : []),
      ...(kvEvents !== undefined ? [{ flag: 'kv-events-port', first: kvEvents.port }] : []),
      ...(kvEvents?.replayPort !== undefined ? [{ flag: 'kv-events-replay-port', first: kvEvents.replayPort }] : []),
  ]
  checkPortClashes(ranges, instances)
  if (kvEvents === undefined) {
    for (const f of ['fault-kv-drop-rate', 'fault-kv-delay-ms'] as const) {
      if (values[f] !== undefined) throw new CliError(`--${f} needs --kv-events-port (there are no KV events to fault)`)
    }
  }

  // Both at once, before a worker starts.
  requireFeatures([...(tokenizer === 'o200k' ? (['o200k'] as const) : []), ...(kvEvents !== undefined ? (['simKvEvents'] as const) : [])])
  const { startSimFleet } = await import('../sim/fleet.js')
  let fleet
  try {
    fleet = await startSimFleet({
      instances,
      port,
      host: values.host ?? '127.0.0.1',
      h2c: values.h2c ?? false,
      ...(values.profile !== undefined ? { profile: values.profile } : {}),
      ...(values.model !== undefined ? { model: values.model } : {}),
      loras: values.lora ?? [],
      ...(nums.kvBlocks !== undefined ? { kvBlocks: nums.kvBlocks } : {}),
      ...(nums.blockSize !== undefined ? { blockSize: nums.blockSize } : {}),
      ...(nums.maxNumSeqs !== undefined ? { maxNumSeqs: nums.maxNumSeqs } : {}),
      ...(nums.maxNumBatchedTokens !== undefined ? { maxNumBatchedTokens: nums.maxNumBatchedTokens } : {}),
      ...(nums.maxModelLen !== undefined ? { maxModelLen: nums.maxModelLen } : {}),
      ...(nums.outputTokens !== undefined ? { outputTokens: nums.outputTokens } : {}),
      ...(nums.timeScale !== undefined ? { timeScale: nums.timeScale } : {}),
      tokenizer,
      ...(values['api-key'] !== undefined ? { apiKey: values['api-key'] } : {}),
      faults,
      ...(faultInstances !== undefined ? { faultInstances } : {}),
      ...(kvEvents !== undefined ? { kvEvents } : {}),
      role,
      sideChannelPort: sidePort,
      bootstrapPort: bootPort,
      ...(nums.kvLeaseMs !== undefined ? { kvLeaseMs: nums.kvLeaseMs } : {}),
      ...(nums.kvLinkGbPerSec !== undefined ? { kvLinkGbPerSec: nums.kvLinkGbPerSec } : {}),
      ...(nums.kvTransferLatencyMs !== undefined ? { kvTransferLatencyMs: nums.kvTransferLatencyMs } : {}),
      ...(nums.bootstrapTimeoutMs !== undefined ? { bootstrapTimeoutMs: nums.bootstrapTimeoutMs } : {}),
      ...(policy !== undefined ? { kvLoadFailurePolicy: policy as KvLoadFailurePolicy } : {}),
    })
  } catch (err) {
    if (err instanceof OutOfRangeError) throw new CliError(err.message)
    const e = err as NodeJS.ErrnoException
    if (e.code === 'EADDRINUSE' || e.code === 'EACCES' || e.code === 'EADDRNOTAVAIL') {
      // Name the flag whose port it was (free ports are never in use).
      const at = (e as { port?: number }).port
      const flag = ranges.find((r) => r.first > 0 && at !== undefined && at >= r.first && at < r.first + instances)?.flag
      if (err instanceof KvBindError) process.stderr.write(`prefix-router sim: cannot listen on ${kvSocketOf(err, kvEvents!)}: ${LISTEN_WHY[e.code]} (${e.code})\n`)
      else process.stderr.write(`prefix-router sim: cannot listen${flag !== undefined ? ` on port ${at} (--${flag})` : ''}: ${e.message}\n`)
      return 1
    }
    throw err
  }
  const w = fleet.workers[0]!
  const sim = w.engine.config
  process.stderr.write(
    `prefix-router sim: ${instances} ${role === 'both' ? '' : `${role} `}worker(s), profile ${values.profile ?? DEFAULT_PROFILE}, model ${w.models.base}, ` +
      `${sim.kvBlocks} KV blocks of ${sim.blockSize} tokens, ` +
      `time scale ${nums.timeScale ?? 1}${tokenizer === DEFAULT_TOKENIZER ? '' : `, tokenizer ${tokenizer}`}${values.h2c ? ', h2c' : ''}; Ctrl-C to stop\n`,
  )
  const boots = fleet.bootstrapPorts ?? []
  process.stderr.write(
    `prefix-router sim: KV side channels on ports ${(fleet.sideChannelPorts ?? []).join(', ')}` +
      `${boots[0] !== undefined ? `; SGLang bootstrap on ports ${boots.join(', ')}` : ''}\n`,
  )
  if (fleet.kvEndpoints !== undefined) {
    const replay = fleet.kvReplayEndpoints
    process.stderr.write(
      `prefix-router sim: KV events (${kvEvents?.encoding ?? 'map'}) on ${fleet.kvEndpoints.join(', ')}` +
        `${replay !== undefined ? `; replay on ${replay.join(', ')}` : ''}\n`,
    )
  }
  process.stdout.write(`${fleet.urls.join('\n')}\n`)
  await new Promise<void>((resolve) => {
    process.once('SIGINT', resolve)
    process.once('SIGTERM', resolve)
  })
  await fleet.close()
  return 0
}
