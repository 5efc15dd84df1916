// A fleet of live workers in this process, on ports port..port+N-1 (or free ports).
import { OutOfRangeError } from '../core/errors.js'
import type { Role } from '../config/disaggregation.js'
import { SGLANG_BOOTSTRAP_PORT } from './bootstrap.js'
import { checkLimit, resolveSim, type SimOptions } from './config.js'
import { NO_FAULTS, type FaultConfig } from './faults.js'
import { SimWorker, type SimKvEventsOptions } from './http-worker.js'
import { getTokenizer } from './tokenizers/index.js'

export interface SimFleetOptions extends SimOptions {
  instances: number
  /** First port; 0 (default) gives every worker a free port. */
  port?: number
  host?: string
  h2c?: boolean
  /** Faults every worker starts with (or only those in `faultInstances`). */
  faults?: Partial<FaultConfig>
  faultInstances?: readonly number[]
  /** Instance ids are `${idPrefix}${index}` (default "sim-", or "prefill-" / "decode-" for those roles). */
  idPrefix?: string
  /** KV side channels (vLLM's VLLM_NIXL_SIDE_CHANNEL_PORT): worker i on sideChannelPort + i; 0 (default) gives free ports. */
  sideChannelPort?: number
  /**
   * SGLang bootstrap servers: worker i on bootstrapPort + i; 0 gives free ports; null: none.
   * Default by role: prefill 8998 + i (SGLang's default port), both free ports, decode none.
   */
  bootstrapPort?: number | null
  /**
   * Publish every engine's KV events as vLLM does: worker i on port + i (replays on
   * replayPort + i); port 0 gives every worker free ports.
   */
  kvEvents?: SimKvEventsOptions
}

export interface SimFleet {
  urls: string[]
  workers: SimWorker[]
  /** Each worker's KV-event PUB endpoint (tcp://host:port); set with kvEvents. */
  kvEndpoints?: string[]
  /** Each worker's replay ROUTER endpoint; set with kvEvents.replayPort. */
  kvReplayEndpoints?: string[]
  /** Each worker's KV side channel port (remote_port of its prefill answers). */
  sideChannelPorts?: number[]
  /** Each worker's SGLang bootstrap port; undefined entries where none runs. */
  bootstrapPorts?: (number | undefined)[]
  close(): Promise<void>
}

export async function startSimFleet(opts: SimFleetOptions): Promise<SimFleet> {
  const n = checkLimit('instances', opts.instances)
  const port = checkLimit('port', opts.port ?? 0)
  if (port > 0 && port + n - 1 > 65535) checkLimit('port', port + n - 1, 'port + instances - 1')
  const sim = resolveSim(opts)
  getTokenizer(sim.tokenizer).load() // now, not in the first request's time
  const faults: FaultConfig = { ...NO_FAULTS, ...opts.faults }
  const kv = opts.kvEvents
  if (kv !== undefined) {
    const kvPort = checkLimit('port', kv.port, 'kvEvents.port')
    if (kvPort > 0) checkLimit('port', kvPort + n - 1, 'kvEvents.port + instances - 1')
    if (kv.replayPort !== undefined) {
      const rp = checkLimit('port', kv.replayPort, 'kvEvents.replayPort')
      if (rp > 0) checkLimit('port', rp + n - 1, 'kvEvents.replayPort + instances - 1')
    }
    if (kv.encoding !== undefined && kv.encoding !== 'map' && kv.encoding !== 'array') {
      throw new OutOfRangeError('kvEvents.encoding', "'map' or 'array'", kv.encoding)
    }
    if (kv.replayFraming !== undefined && kv.replayFraming !== 'topic' && kv.replayFraming !== 'legacy') {
      throw new OutOfRangeError('kvEvents.replayFraming', "'topic' or 'legacy'", kv.replayFraming)
    }
  }
  const side = checkLimit('port', opts.sideChannelPort ?? 0, 'sideChannelPort')
  if (side > 0) checkLimit('port', side + n - 1, 'sideChannelPort + instances - 1')
  const boot = opts.bootstrapPort === undefined ? defaultBootstrapPort(sim.role) : opts.bootstrapPort
  if (boot !== null) {
    checkLimit('port', boot, 'bootstrapPort')
    if (boot > 0) checkLimit('port', boot + n - 1, 'bootstrapPort + instances - 1')
  }
  const prefix = opts.idPrefix ?? (sim.role === 'both' ? 'sim-' : `${sim.role}-`)
  const workers: SimWorker[] = []
  for (let i = 0; i < n; i++) {
    const faulty = opts.faultInstances === undefined || opts.faultInstances.includes(i)
    workers.push(
      new SimWorker({
        id: `${prefix}${i}`,
        index: i,
        host: opts.host ?? '127.0.0.1',
        port: port === 0 ? 0 : port + i,
        h2c: opts.h2c ?? false,
        sim,
        faults: faulty ? faults : { ...NO_FAULTS },
        ...(kv !== undefined ? { kvEvents: kvFor(kv, i) } : {}),
        sideChannelPort: side === 0 ? 0 : side + i,
        ...(boot !== null ? { bootstrapPort: boot === 0 ? 0 : boot + i } : {}),
      }),
    )
  }
  const close = async (): Promise<void> => {
    await Promise.all(workers.map((w) => w.close()))
  }
  try {
    for (const w of workers) await w.start()
  } catch (err) {
    await close()
    throw err
  }
  const out: SimFleet = {
    urls: workers.map((w) => w.url),
    workers,
    close,
    sideChannelPorts: workers.map((w) => w.sideChannelPort),
    bootstrapPorts: workers.map((w) => w.bootstrapPort),
  }
  if (kv !== undefined) out.kvEndpoints = workers.map((w) => w.kvPublisher!.endpoint)
  if (kv?.replayPort !== undefined) out.kvReplayEndpoints = workers.map((w) => w.kvPublisher!.replayEndpoint!)
  return out
}

/** SGLang's default port for prefill workers, free ports for `both`, none for decode workers. */
export function defaultBootstrapPort(role: Role): number | null {
  return role === 'prefill' ? SGLANG_BOOTSTRAP_PORT : role === 'both' ? 0 : null
}

/** Worker i's ports: the base + i, or free ports for a base of 0. */
function kvFor(kv: SimKvEventsOptions, i: number): SimKvEventsOptions {
  const out: SimKvEventsOptions = { ...kv, port: kv.port === 0 ? 0 : kv.port + i }
  if (kv.replayPort !== undefined) out.replayPort = kv.replayPort === 0 ? 0 : kv.replayPort + i
  return out
}
