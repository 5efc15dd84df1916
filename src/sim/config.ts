// Simulator options, shared by the CLI, startSimFleet and the virtual fleet: defaults come
// from the profile; every number is range-checked with an error naming the option.
import { OutOfRangeError } from '../core/errors.js'
import { ROLES, type Role } from '../config/disaggregation.js'
import { engineConfig, type EngineConfig } from './engine.js'
import { KV_LOAD_FAILURE_POLICIES, type KvLoadFailurePolicy, type KvTransferConfig } from './kv-transfer.js'
import type { LoraSpec } from './models.js'
import { DEFAULT_PROFILE, PROFILES, type Profile } from './profiles.js'
import { DEFAULT_TOKENIZER, isTokenizerName, TOKENIZERS, type TokenizerName } from './tokenizers/index.js'

export interface SimOptions {
  /** Profile name (see profiles.ts) or a Profile object. */
  profile?: string | Profile
  /** Served model name (default: the profile's). */
  model?: string
  /** LoRA adapters: "name", "name=path" or {name, path}. */
  loras?: readonly (string | LoraSpec)[]
  kvBlocks?: number
  blockSize?: number
  maxNumSeqs?: number
  maxNumBatchedTokens?: number
  maxModelLen?: number
  /** Output length of requests without max_tokens. */
  outputTokens?: number
  /** Simulated time runs this many times faster than wall time (live workers only). */
  timeScale?: number
  /** How prompt text becomes tokens: `bytes` (4 bytes a token, the default) or `o200k` (OpenAI's BPE). */
  tokenizer?: TokenizerName
  /** vLLM's --api-key: /v1/* answers 401 without `Authorization: Bearer <key>`. */
  apiKey?: string
  /**
   * What the instances do in a disaggregated fleet (default both). Labels and defaults only:
   * every role serves whole requests and either NIXL leg, as vLLM with kv_role kv_both does;
   * SGLang's legs (identical bodies) are told apart by it.
   */
  role?: Role
  /** How long a prefill instance holds blocks no decode has asked for (vLLM's kv_lease_duration; default 30,000). */
  kvLeaseMs?: number
  /** vLLM's kv_load_failure_policy: `fail` (default) or `recompute`. */
  kvLoadFailurePolicy?: KvLoadFailurePolicy
  /** KV link bandwidth between a prefill and a decode instance, GB/s (default: the profile's). */
  kvLinkGbPerSec?: number
  /** Fixed cost of a KV transfer, ms (default: the profile's). */
  kvTransferLatencyMs?: number
  /** SGLang: how long a bootstrap room waits for its other leg (default 300,000 ms, SGLang's). */
  bootstrapTimeoutMs?: number
}

export interface ResolvedSim {
  profile: Profile
  model: string
  loras: LoraSpec[]
  engine: EngineConfig
  outputTokens: number
  timeScale: number
  tokenizer: TokenizerName
  apiKey: string | undefined
  role: Role
}

interface Limit {
  min: number
  max: number
  integer: boolean
}

/** Allowed ranges, by option name; the CLI prints the same ranges under flag names. */
export const SIM_LIMITS = {
  instances: { min: 1, max: 1024, integer: true },
  port: { min: 0, max: 65535, integer: true },
  kvBlocks: { min: 16, max: 50_000_000, integer: true },
  blockSize: { min: 1, max: 1024, integer: true },
  maxNumSeqs: { min: 1, max: 65_536, integer: true },
  maxNumBatchedTokens: { min: 1, max: 1_048_576, integer: true },
  maxModelLen: { min: 1, max: 16_777_216, integer: true },
  outputTokens: { min: 1, max: 1_000_000, integer: true },
  timeScale: { min: 0.001, max: 100_000, integer: false },
  kvLeaseMs: { min: 1, max: 3_600_000, integer: true },
  kvLinkGbPerSec: { min: 0.001, max: 100_000, integer: false },
  kvTransferLatencyMs: { min: 0, max: 60_000, integer: false },
  bootstrapTimeoutMs: { min: 1, max: 3_600_000, integer: true },
} as const satisfies Record<string, Limit>

export type LimitName = keyof typeof SIM_LIMITS

export function describeLimit(name: LimitName): string {
  const l: Limit = SIM_LIMITS[name]
  return `${l.integer ? 'an integer' : 'a number'} from ${l.min} to ${l.max}`
}

export function checkLimit(name: LimitName, v: unknown, label: string = name): number {
  const l: Limit = SIM_LIMITS[name]
  if (typeof v !== 'number' || !Number.isFinite(v) || v < l.min || v > l.max || (l.integer && !Number.isInteger(v))) {
    throw new OutOfRangeError(label, describeLimit(name), v)
  }
  return v
}

export function parseLora(spec: string | LoraSpec): LoraSpec {
  if (typeof spec !== 'string') return spec
  const eq = spec.indexOf('=')
  const name = eq < 0 ? spec : spec.slice(0, eq)
  const path = eq < 0 ? spec : spec.slice(eq + 1)
  if (name.length === 0 || path.length === 0) throw new OutOfRangeError('lora', '"name" or "name=path"', spec)
  return { name, path }
}

export function resolveProfile(p: string | Profile | undefined): Profile {
  if (p === undefined) return PROFILES[DEFAULT_PROFILE]!
  if (typeof p !== 'string') return p
  const found = PROFILES[p.toLowerCase()]
  if (found === undefined) throw new OutOfRangeError('profile', `one of ${Object.keys(PROFILES).join(', ')}`, p)
  return found
}

export function resolveSim(o: SimOptions = {}): ResolvedSim {
  const profile = resolveProfile(o.profile)
  const opt = <K extends LimitName>(k: K, v: number | undefined): number | undefined =>
    v === undefined ? undefined : checkLimit(k, v)
  const overrides: Partial<Omit<EngineConfig, 'latency' | 'kv'>> = {}
  const set = (k: 'kvBlocks' | 'blockSize' | 'maxNumSeqs' | 'maxNumBatchedTokens' | 'maxModelLen'): void => {
    const v = opt(k, o[k])
    if (v !== undefined) overrides[k] = v
  }
  set('kvBlocks')
  set('blockSize')
  set('maxNumSeqs')
  set('maxNumBatchedTokens')
  set('maxModelLen')
  const model = o.model ?? profile.model
  if (typeof model !== 'string' || model.length === 0) throw new OutOfRangeError('model', 'a non-empty string', model)
  const loras = (o.loras ?? []).map(parseLora)
  const names = new Set<string>([model])
  for (const l of loras) {
    if (names.has(l.name)) throw new OutOfRangeError('lora', 'distinct adapter names, different from the model', l.name)
    names.add(l.name)
  }
  const tokenizer = o.tokenizer ?? DEFAULT_TOKENIZER
  if (!isTokenizerName(tokenizer)) throw new OutOfRangeError('tokenizer', `one of ${TOKENIZERS.join(', ')}`, tokenizer)
  if (o.apiKey !== undefined && o.apiKey.trim() === '') throw new OutOfRangeError('apiKey', 'a non-empty key', o.apiKey)
  const role = o.role ?? 'both'
  if (!(ROLES as readonly string[]).includes(role)) throw new OutOfRangeError('role', `one of ${ROLES.join(', ')}`, role)
  const kv: Partial<KvTransferConfig> = {}
  const lease = opt('kvLeaseMs', o.kvLeaseMs)
  if (lease !== undefined) kv.leaseMs = lease
  const link = opt('kvLinkGbPerSec', o.kvLinkGbPerSec)
  if (link !== undefined) kv.linkBytesPerSec = link * 1e9
  const lat = opt('kvTransferLatencyMs', o.kvTransferLatencyMs)
  if (lat !== undefined) kv.latencyMs = lat
  const boot = opt('bootstrapTimeoutMs', o.bootstrapTimeoutMs)
  if (boot !== undefined) kv.bootstrapTimeoutMs = boot
  if (o.kvLoadFailurePolicy !== undefined) {
    if (!(KV_LOAD_FAILURE_POLICIES as readonly string[]).includes(o.kvLoadFailurePolicy)) {
      throw new OutOfRangeError('kvLoadFailurePolicy', `one of ${KV_LOAD_FAILURE_POLICIES.join(', ')}`, o.kvLoadFailurePolicy)
    }
    kv.loadFailurePolicy = o.kvLoadFailurePolicy
  }
  return {
    profile,
    model,
    loras,
    role,
    engine: engineConfig(profile, overrides, kv),
    outputTokens: opt('outputTokens', o.outputTokens) ?? profile.outputTokens,
    timeScale: opt('timeScale', o.timeScale) ?? 1,
    tokenizer,
    apiKey: o.apiKey,
  }
}
