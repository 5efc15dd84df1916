// A fleet of live workers in this process, on ports port..port+N-1 (or free ports).
import { checkLimit, resolveSim, type SimOptions } from './config.js'
import { NO_FAULTS, type FaultConfig } from './faults.js'
import { SimWorker } from './http-worker.js'
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
  /** Instance ids are `${idPrefix}${index}` (default "sim-"). */
  idPrefix?: string
}

export interface SimFleet {
  urls: string[]
  workers: SimWorker[]
  close(): Promise<void>
}

export async function startSimFleet(opts: SimFleetOptions): Promise<SimFleet> {
  const n = checkLimit('instances', opts.instances)
  const port = checkLimit('port', opts.port ?? 0)
  if (port > 0 && port + n - 1 > 65535) checkLimit('port', port + n - 1, 'port + instances - 1')
  const sim = resolveSim(opts)
  getTokenizer(sim.tokenizer).load() // now, not in the first request's time
  const faults: FaultConfig = { ...NO_FAULTS, ...opts.faults }
  const workers: SimWorker[] = []
  for (let i = 0; i < n; i++) {
    const faulty = opts.faultInstances === undefined || opts.faultInstances.includes(i)
    workers.push(
      new SimWorker({
        id: `${opts.idPrefix ?? 'sim-'}${i}`,
        index: i,
        host: opts.host ?? '127.0.0.1',
        port: port === 0 ? 0 : port + i,
        h2c: opts.h2c ?? false,
        sim,
        faults: faulty ? faults : { ...NO_FAULTS },
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
  return { urls: workers.map((w) => w.url), workers, close }
}
