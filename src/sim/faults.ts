// Faults a worker can be told to inject, by flags at start or by POST /sim/faults at run
// time (which replaces the whole set: keys left out are off). Draws use a seeded PRNG so
// a test or an experiment with a fixed seed sees the same requests fail.
import { ApiError } from './openai-shapes.js'

export interface FaultConfig {
  /** Share of generation requests answered with `errorStatus`. */
  errorRate: number
  errorStatus: 500 | 503
  /** /health and /ping answer 503. */
  healthFail: boolean
  /** The connection is closed once this many tokens have been produced (streamed or not); null = never. */
  dropAfterTokens: number | null
  /** Share of generation requests that are never answered. */
  hangRate: number
  /** Simulated milliseconds added before a request reaches the scheduler. */
  delayMs: number
  /** Share of KV-event batches not sent live (a gap the subscriber must notice). */
  kvDropRate: number
  /** Wall milliseconds KV-event batches are held back. */
  kvDelayMs: number
  seed: number
}

export const NO_FAULTS: Readonly<FaultConfig> = {
  errorRate: 0,
  errorStatus: 500,
  healthFail: false,
  dropAfterTokens: null,
  hangRate: 0,
  delayMs: 0,
  kvDropRate: 0,
  kvDelayMs: 0,
  seed: 1,
}

/** The JSON keys of POST /sim/faults, their FaultConfig field and allowed values. */
const KEYS = {
  error_rate: 'a number from 0 to 1',
  error_status: '500 or 503',
  health_fail: 'a boolean',
  drop_after_tokens: 'an integer from 0 to 1000000, or null',
  hang_rate: 'a number from 0 to 1',
  delay_ms: 'a number from 0 to 3600000',
  kv_drop_rate: 'a number from 0 to 1',
  kv_delay_ms: 'a number from 0 to 3600000',
  seed: 'an integer from 0 to 4294967295',
  restart: 'true (restart the engine: cache emptied, requests aborted, KV-event sequence back to 0)',
  down_ms: 'a number from 1 to 3600000 (wall milliseconds the worker refuses connections)',
} as const

function rangeErr(key: keyof typeof KEYS, v: unknown): ApiError {
  return new ApiError(400, `${key} must be ${KEYS[key]}; got ${JSON.stringify(v)}`, 'BadRequestError', key)
}

function rate(key: 'error_rate' | 'hang_rate' | 'kv_drop_rate', v: unknown): number {
  if (typeof v !== 'number' || !(v >= 0 && v <= 1)) throw rangeErr(key, v)
  return v
}

/** Parses a POST /sim/faults body: the new fault set, an optional down time and whether to restart the engine. */
export function parseFaults(body: unknown): { faults: FaultConfig; downMs: number | undefined; restart: boolean } {
  if (typeof body !== 'object' || body === null || Array.isArray(body)) {
    throw new ApiError(400, 'The request body must be a JSON object.')
  }
  const b = body as Record<string, unknown>
  for (const k of Object.keys(b)) {
    if (!(k in KEYS)) throw new ApiError(400, `unknown fault '${k}'; known: ${Object.keys(KEYS).join(', ')}`, 'BadRequestError', k)
  }
  const f: FaultConfig = { ...NO_FAULTS }
  if (b.error_rate !== undefined) f.errorRate = rate('error_rate', b.error_rate)
  if (b.error_status !== undefined) {
    if (b.error_status !== 500 && b.error_status !== 503) throw rangeErr('error_status', b.error_status)
    f.errorStatus = b.error_status
  }
  if (b.health_fail !== undefined) {
    if (typeof b.health_fail !== 'boolean') throw rangeErr('health_fail', b.health_fail)
    f.healthFail = b.health_fail
  }
  if (b.drop_after_tokens !== undefined && b.drop_after_tokens !== null) {
    const v = b.drop_after_tokens
    if (typeof v !== 'number' || !Number.isInteger(v) || v < 0 || v > 1_000_000) throw rangeErr('drop_after_tokens', v)
    f.dropAfterTokens = v
  }
  if (b.hang_rate !== undefined) f.hangRate = rate('hang_rate', b.hang_rate)
  if (b.delay_ms !== undefined) {
    const v = b.delay_ms
    if (typeof v !== 'number' || !(v >= 0 && v <= 3_600_000)) throw rangeErr('delay_ms', v)
    f.delayMs = v
  }
  if (b.kv_drop_rate !== undefined) f.kvDropRate = rate('kv_drop_rate', b.kv_drop_rate)
  if (b.kv_delay_ms !== undefined) {
    const v = b.kv_delay_ms
    if (typeof v !== 'number' || !(v >= 0 && v <= 3_600_000)) throw rangeErr('kv_delay_ms', v)
    f.kvDelayMs = v
  }
  if (b.restart !== undefined && b.restart !== true) throw rangeErr('restart', b.restart)
  if (b.seed !== undefined) {
    const v = b.seed
    if (typeof v !== 'number' || !Number.isInteger(v) || v < 0 || v > 0xffffffff) throw rangeErr('seed', v)
    f.seed = v
  }
  let downMs: number | undefined
  if (b.down_ms !== undefined) {
    const v = b.down_ms
    if (typeof v !== 'number' || !(v >= 1 && v <= 3_600_000)) throw rangeErr('down_ms', v)
    downMs = v
  }
  return { faults: f, downMs, restart: b.restart === true }
}

export function faultsJson(f: FaultConfig): object {
  return {
    error_rate: f.errorRate,
    error_status: f.errorStatus,
    health_fail: f.healthFail,
    drop_after_tokens: f.dropAfterTokens,
    hang_rate: f.hangRate,
    delay_ms: f.delayMs,
    kv_drop_rate: f.kvDropRate,
    kv_delay_ms: f.kvDelayMs,
    seed: f.seed,
  }
}

export type FaultAction = { kind: 'error'; status: number } | { kind: 'hang' } | null

export class FaultInjector {
  private state = 0

  constructor(private cfg: FaultConfig = { ...NO_FAULTS }) {
    this.state = cfg.seed >>> 0
  }

  get config(): Readonly<FaultConfig> {
    return this.cfg
  }

  set(cfg: FaultConfig): void {
    this.cfg = cfg
    this.state = cfg.seed >>> 0
  }

  /** What happens to the next generation request. */
  pick(): FaultAction {
    const c = this.cfg
    if (c.errorRate > 0 && this.random() < c.errorRate) return { kind: 'error', status: c.errorStatus }
    if (c.hangRate > 0 && this.random() < c.hangRate) return { kind: 'hang' }
    return null
  }

  // mulberry32: small, fast and good enough to pick which requests fail.
  private random(): number {
    let t = (this.state = (this.state + 0x6d2b79f5) >>> 0)
    t = Math.imul(t ^ (t >>> 15), t | 1)
    t ^= t + Math.imul(t ^ (t >>> 7), t | 61)
    return ((t ^ (t >>> 14)) >>> 0) / 4294967296
  }
}
