// `serve` and `route` share one way to build the configuration: defaults < file < env < flags.
import { ConfigError, parseConfig, readConfigFile, type Config } from '../config.js'
import { CliError } from './cli-error.js'

export const SERVE_FLAGS = {
  config: { type: 'string' },
  upstream: { type: 'string', multiple: true },
  strategy: { type: 'string' },
  'prefix-length': { type: 'string' },
  'concurrency-threshold': { type: 'string' },
  placement: { type: 'string' },
  'load-factor': { type: 'string' },
  'prefill-weight': { type: 'string' },
  'match-length': { type: 'string' },
  host: { type: 'string' },
  port: { type: 'string' },
  'admin-host': { type: 'string' },
  'admin-port': { type: 'string' },
  'tls-cert': { type: 'string' },
  'tls-key': { type: 'string' },
  'upstream-protocol': { type: 'string' },
  'max-body-bytes': { type: 'string' },
  'drain-delay-ms': { type: 'string' },
  'drain-timeout-ms': { type: 'string' },
  'debug-headers': { type: 'boolean' },
  'log-level': { type: 'string' },
  'log-prompts': { type: 'boolean' },
} as const

export type ServeFlags = Partial<Record<keyof typeof SERVE_FLAGS, string | string[] | boolean>>

/** Environment variables for container use, each the twin of a flag. */
export const ENV: Record<string, keyof typeof SERVE_FLAGS> = {
  PREFIX_ROUTER_CONFIG: 'config',
  PREFIX_ROUTER_UPSTREAMS: 'upstream',
  PREFIX_ROUTER_STRATEGY: 'strategy',
  PREFIX_ROUTER_PREFIX_LENGTH: 'prefix-length',
  PREFIX_ROUTER_CONCURRENCY_THRESHOLD: 'concurrency-threshold',
  PREFIX_ROUTER_PLACEMENT: 'placement',
  PREFIX_ROUTER_LOAD_FACTOR: 'load-factor',
  PREFIX_ROUTER_PREFILL_WEIGHT: 'prefill-weight',
  PREFIX_ROUTER_MATCH_LENGTH: 'match-length',
  PREFIX_ROUTER_HOST: 'host',
  PREFIX_ROUTER_PORT: 'port',
  PREFIX_ROUTER_ADMIN_HOST: 'admin-host',
  PREFIX_ROUTER_ADMIN_PORT: 'admin-port',
  PREFIX_ROUTER_TLS_CERT: 'tls-cert',
  PREFIX_ROUTER_TLS_KEY: 'tls-key',
  PREFIX_ROUTER_UPSTREAM_PROTOCOL: 'upstream-protocol',
  PREFIX_ROUTER_MAX_BODY_BYTES: 'max-body-bytes',
  PREFIX_ROUTER_DRAIN_DELAY_MS: 'drain-delay-ms',
  PREFIX_ROUTER_DRAIN_TIMEOUT_MS: 'drain-timeout-ms',
  PREFIX_ROUTER_DEBUG_HEADERS: 'debug-headers',
  PREFIX_ROUTER_LOG_LEVEL: 'log-level',
  PREFIX_ROUTER_LOG_PROMPTS: 'log-prompts',
}

function fromEnv(env: NodeJS.ProcessEnv): ServeFlags {
  const out: ServeFlags = {}
  for (const [name, flag] of Object.entries(ENV)) {
    const v = env[name]
    if (v === undefined || v === '') continue
    const kind = SERVE_FLAGS[flag]
    if (kind.type === 'boolean') {
      if (!/^(1|0|true|false|yes|no)$/i.test(v)) throw new CliError(`${name} must be true or false; got '${v}'`)
      out[flag] = /^(1|true|yes)$/i.test(v)
    } else out[flag] = 'multiple' in kind ? v.split(/[\s,]+/).filter(Boolean) : v
  }
  return out
}

function int(flag: string, v: unknown): number {
  const s = String(v)
  if (!/^\d+$/.test(s)) throw new CliError(`--${flag} must be a whole number; got '${s}'`)
  return Number(s)
}

function num(flag: string, v: unknown): number {
  const s = String(v).trim()
  const n = s === '' ? NaN : Number(s)
  if (!Number.isFinite(n)) throw new CliError(`--${flag} must be a number; got '${String(v)}'`)
  return n
}

function set(obj: Record<string, unknown>, path: string[], value: unknown): void {
  let o = obj
  for (const k of path.slice(0, -1)) {
    if (o[k] === undefined || typeof o[k] !== 'object') o[k] = {}
    o = o[k] as Record<string, unknown>
  }
  o[path[path.length - 1]!] = value
}

/**
 * The configuration from the file (flag or env), the environment and the flags. Upstreams
 * given by flag or env replace the instances of the first endpoint (or make `default`).
 */
export function buildConfig(flags: ServeFlags, env: NodeJS.ProcessEnv = process.env): { config: Config; hasUpstreams: boolean } {
  const f: ServeFlags = { ...fromEnv(env), ...flags }
  const raw = (f.config ? readConfigFile(String(f.config)) : {}) ?? {}
  if (typeof raw !== 'object' || Array.isArray(raw)) throw new ConfigError(`config file '${String(f.config)}' must hold an object`)
  const r = raw as Record<string, unknown>
  if (f.strategy !== undefined) set(r, ['routing', 'strategy'], f.strategy)
  if (f['prefix-length'] !== undefined) set(r, ['routing', 'prefixLength'], int('prefix-length', f['prefix-length']))
  if (f['concurrency-threshold'] !== undefined) set(r, ['routing', 'concurrencyThreshold'], int('concurrency-threshold', f['concurrency-threshold']))
  if (f.placement !== undefined) set(r, ['routing', 'placement'], f.placement)
  if (f['load-factor'] !== undefined) set(r, ['routing', 'loadFactor'], num('load-factor', f['load-factor']))
  if (f['prefill-weight'] !== undefined) set(r, ['routing', 'prefillWeight'], num('prefill-weight', f['prefill-weight']))
  if (f['match-length'] !== undefined) set(r, ['routing', 'matchLength'], int('match-length', f['match-length']))
  if (f.host !== undefined) set(r, ['listen', 'host'], f.host)
  if (f.port !== undefined) set(r, ['listen', 'port'], int('port', f.port))
  if (f['admin-host'] !== undefined) set(r, ['admin', 'host'], f['admin-host'])
  if (f['admin-port'] !== undefined) set(r, ['admin', 'port'], int('admin-port', f['admin-port']))
  if ((f['tls-cert'] === undefined) !== (f['tls-key'] === undefined)) throw new CliError('--tls-cert and --tls-key go together')
  if (f['tls-cert'] !== undefined) r.tls = { cert: f['tls-cert'], key: f['tls-key'] }
  if (f['upstream-protocol'] !== undefined) set(r, ['upstream', 'protocol'], f['upstream-protocol'])
  if (f['max-body-bytes'] !== undefined) set(r, ['limits', 'maxBodyBytes'], int('max-body-bytes', f['max-body-bytes']))
  if (f['drain-delay-ms'] !== undefined) set(r, ['drain', 'delayMs'], int('drain-delay-ms', f['drain-delay-ms']))
  if (f['drain-timeout-ms'] !== undefined) set(r, ['drain', 'timeoutMs'], int('drain-timeout-ms', f['drain-timeout-ms']))
  if (f['debug-headers'] !== undefined) r.debugHeaders = f['debug-headers']
  if (f['log-level'] !== undefined) set(r, ['log', 'level'], f['log-level'])
  if (f['log-prompts'] !== undefined) set(r, ['log', 'prompts'], f['log-prompts'])
  const ups = f.upstream === undefined ? [] : Array.isArray(f.upstream) ? f.upstream : [String(f.upstream)]
  if (ups.length > 0) {
    const eps = Array.isArray(r.endpoints) ? (r.endpoints as Record<string, unknown>[]) : []
    if (eps.length === 0) eps.push({ name: 'default' })
    eps[0]!.instances = ups
    r.endpoints = eps
  }
  const hasUpstreams = Array.isArray(r.endpoints) && r.endpoints.length > 0
  return { config: parseConfig(r, f.config ? `config (file '${String(f.config)}', environment and flags)` : 'configuration'), hasUpstreams }
}
