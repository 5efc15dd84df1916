// `serve` and `route` share one way to build the configuration: defaults < file < env < flags,
// each setting read as the table in flags.ts says. Errors name what the user typed: the flag,
// the environment variable, or (from config.ts) the file's key.
import { ConfigError, parseConfig, readConfigFile, type Config } from '../config/config.js'
import { dnsServer, dnsUrl } from '../config/discovery.js'
import { didYouMean } from '../config/suggest.js'
import { upstreamUrlProblem } from '../config/upstream-url.js'
import { CliError } from '../command-line/cli-error.js'
import { EPP_OWN_FLAGS } from './epp-flags.js'
import { ENV_PREFIX, FLAGS, type FlagSpec } from './flags.js'
import { entriesFromEnv, roleInstances } from './role-flags.js'

/** Flag values as parseArgs gives them, by flag name. */
export type ServeFlags = Partial<Record<string, string | string[] | boolean | undefined>>

export interface BuiltConfig {
  config: Config
  hasUpstreams: boolean
  /** Where the instances came from, as the user gave them ('--upstream', a variable, the file). */
  upstreamsFrom: string | undefined
  /** '--demo' or 'PREFIX_ROUTER_DEMO' when the embedded simulated fleet was asked for. */
  demoFrom: string | undefined
  /** Size of the demo fleet, and what set it. */
  simInstances: { n: number; from: string | undefined }
}

/** A setting's value and what the user typed to give it. */
interface Given {
  value: string | string[] | boolean
  from: string
}

const BOOL = /^(1|0|true|false|yes|no)$/i

function fromEnv(spec: FlagSpec, v: string): Given['value'] {
  if (spec.kind === 'boolean') {
    if (!BOOL.test(v)) throw new CliError(`${spec.env} must be true or false; got '${v}'`)
    return /^(1|true|yes)$/i.test(v)
  }
  if (spec.kind === 'entries') return entriesFromEnv(v)
  return spec.kind === 'list' ? v.split(/[\s,]+/).filter(Boolean) : v
}

/** A variable with our prefix that no flag owns is a typo, not something to ignore. */
function checkEnvNames(env: NodeJS.ProcessEnv): void {
  // The endpoint picker's own variables (epp-flags.ts) are no typo either.
  const known = new Set([...FLAGS, ...EPP_OWN_FLAGS].map((f) => f.env))
  const unknown = Object.keys(env).filter((k) => k.startsWith(ENV_PREFIX) && !known.has(k))
  if (unknown.length === 0) return
  const suffixes = [...known].map((k) => k.slice(ENV_PREFIX.length))
  const lines = unknown.map((k) => `unknown environment variable ${k}${didYouMean(k.slice(ENV_PREFIX.length), suffixes, (s) => ENV_PREFIX + s)}`)
  throw new CliError(`${lines.join('\n')}\n(every serve flag has a twin: see prefix-router serve --help)`)
}

function settings(flags: ServeFlags, env: NodeJS.ProcessEnv): Map<string, Given> {
  checkEnvNames(env)
  const out = new Map<string, Given>()
  for (const spec of FLAGS) {
    const e = env[spec.env]
    if (e !== undefined && e !== '') out.set(spec.name, { value: fromEnv(spec, e), from: spec.env })
    const f = flags[spec.name]
    if (f !== undefined) out.set(spec.name, { value: f, from: `--${spec.name}` })
  }
  return out
}

function convert(spec: FlagSpec, g: Given): unknown {
  const s = String(g.value)
  switch (spec.kind) {
    case 'int':
      if (!/^\d+$/.test(s)) throw new CliError(`${g.from} must be a whole number; got '${s}'`)
      return Number(s)
    case 'number': {
      const n = s.trim() === '' ? NaN : Number(s)
      if (!Number.isFinite(n)) throw new CliError(`${g.from} must be a number; got '${s}'`)
      return n
    }
    default:
      return g.value
  }
}

function set(obj: Record<string, unknown>, path: readonly string[], value: unknown): void {
  let o = obj
  for (const k of path.slice(0, -1)) {
    if (o[k] === undefined || typeof o[k] !== 'object' || o[k] === null) o[k] = {}
    o = o[k] as Record<string, unknown>
  }
  o[path[path.length - 1]!] = value
}

function upstreams(g: Given): string[] {
  const list = Array.isArray(g.value) ? g.value : [String(g.value)]
  for (const u of list) {
    const p = upstreamUrlProblem(u)
    if (p === undefined) continue
    const meant = p.meant === undefined ? '' : g.from.startsWith('--') ? ` (did you mean ${g.from} ${p.meant}?)` : ` (did you mean ${p.meant}?)`
    throw new ConfigError(`${g.from} ${p.problem}; got '${u}'${meant}`)
  }
  return list
}

/** The flags that name DNS names to discover instances from, and the role each gives them. */
const DNS_FLAGS = [
  ['upstream-dns', undefined],
  ['prefill-dns', 'prefill'],
  ['decode-dns', 'decode'],
] as const

/** DNS discovery sources from --upstream-dns, --prefill-dns and --decode-dns, each asking --dns-server when given. */
function upstreamDns(given: Map<string, Given>): Record<string, unknown>[] {
  const server = given.get('dns-server')
  const named = DNS_FLAGS.filter(([flag]) => given.has(flag))
  if (named.length === 0) {
    if (server !== undefined) throw new CliError(`${server.from} is the resolver for --upstream-dns, --prefill-dns and --decode-dns names; give one of them too (got only ${server.from} '${String(server.value)}')`)
    return []
  }
  if (server !== undefined && !dnsServer.safeParse(server.value).success) throw new CliError(`${server.from} must be IP:PORT, the resolver's address ([v6]:PORT for IPv6); got '${String(server.value)}'`)
  return named.flatMap(([flag, role]) => {
    const names = given.get(flag)!
    const list = Array.isArray(names.value) ? names.value : [String(names.value)]
    return list.map((url) => {
      if (!dnsUrl.safeParse(url).success) throw new CliError(`${names.from} must be http://NAME:PORT (or https://), the name to resolve; got '${url}'`)
      return { type: 'dns', url, ...(server !== undefined && { server: String(server.value) }), ...(role !== undefined && { role }) }
    })
  })
}

/** buildConfig for a command's start: a configuration error is the CLI's one-line refusal. */
export function buildForStart(flags: ServeFlags): BuiltConfig {
  try {
    return buildConfig(flags)
  } catch (err) {
    if (err instanceof ConfigError) throw new CliError(err.message)
    throw err
  }
}

/**
 * The configuration from the file (flag or env), the environment and the flags. Instances
 * given by flag or env (--upstream, --prefill, --decode) replace the instances of the first
 * endpoint (or make `default`); DNS names given so add discovery sources to it.
 */
export function buildConfig(flags: ServeFlags, env: NodeJS.ProcessEnv = process.env): BuiltConfig {
  const given = settings(flags, env)
  const file = given.get('config')
  const raw = (file ? readConfigFile(String(file.value)) : {}) ?? {}
  if (typeof raw !== 'object' || Array.isArray(raw)) throw new ConfigError(`config file '${String(file?.value)}' must hold an object`)
  const r = raw as Record<string, unknown>
  const fileHasTls = typeof r.tls === 'object' && r.tls !== null
  const origins = new Map<string, string>()
  for (const spec of FLAGS) {
    const g = given.get(spec.name)
    if (g === undefined || spec.key === undefined) continue
    set(r, spec.key, convert(spec, g))
    origins.set(spec.key.join('.'), g.from)
  }
  // The sharing's settings without its address would share nothing: say so, naming both.
  const shareUrl = (r.shareLoad as { url?: unknown } | undefined)?.url
  const shareOpt = given.get('share-load-interval-ms') ?? given.get('share-load-prefix')
  if (shareOpt !== undefined && shareUrl === undefined) {
    throw new CliError(`${shareOpt.from} goes with --share-load (the Redis URL: redis://HOST:PORT); got only ${shareOpt.from} '${String(shareOpt.value)}'`)
  }
  const cert = given.get('tls-cert')
  const key = given.get('tls-key')
  if ((cert === undefined) !== (key === undefined) && !fileHasTls) throw new CliError(`${cert?.from ?? '--tls-cert'} and ${key?.from ?? '--tls-key'} go together`)

  let upstreamsFrom: string | undefined
  const ups = given.get('upstream')
  const upsList = ups === undefined ? [] : upstreams(ups)
  const prefill = given.get('prefill')
  const decode = given.get('decode')
  // --upstream (instances doing both), --prefill and --decode together are the first endpoint's instances.
  const withRoles = roleInstances(prefill, decode, ups === undefined ? undefined : { urls: upsList, from: ups.from })
  if (upsList.length > 0 || withRoles.length > 0) {
    const eps = Array.isArray(r.endpoints) ? (r.endpoints as Record<string, unknown>[]) : []
    if (eps.length === 0) eps.push({ name: 'default' })
    eps[0]!.instances = [...upsList, ...withRoles]
    r.endpoints = eps
    upstreamsFrom = (upsList.length > 0 ? ups : (prefill ?? decode))!.from
    origins.set('endpoints[0].instances', [ups, prefill, decode].filter((g) => g !== undefined).map((g) => g.from).join(', '))
  }
  const dns = upstreamDns(given)
  if (dns.length > 0) {
    const eps = Array.isArray(r.endpoints) ? (r.endpoints as Record<string, unknown>[]) : []
    if (eps.length === 0) eps.push({ name: 'default' })
    eps[0]!.discovery = [...(Array.isArray(eps[0]!.discovery) ? eps[0]!.discovery : []), ...dns]
    r.endpoints = eps
    upstreamsFrom ??= DNS_FLAGS.map(([flag]) => given.get(flag)).find((g) => g !== undefined)!.from
  }
  const hasUpstreams = Array.isArray(r.endpoints) && r.endpoints.length > 0
  if (hasUpstreams && upstreamsFrom === undefined) upstreamsFrom = `the endpoints in config file '${String(file?.value)}'`

  const demo = given.get('demo')
  const sim = given.get('sim-instances')
  const n = sim === undefined ? 4 : (convert(FLAGS.find((f) => f.name === 'sim-instances')!, sim) as number)
  if (sim !== undefined && (n < 1 || n > 64)) throw new CliError(`${sim.from} must be from 1 to 64; got '${String(sim.value)}'`)

  const originOf = (at: string) => [...origins].find(([k]) => at === k || at.startsWith(`${k}.`) || at.startsWith(`${k}[`))?.[1]
  const source = file ? `config (file '${String(file.value)}', environment and flags)` : 'configuration'
  return {
    config: parseConfig(r, source, originOf),
    hasUpstreams,
    upstreamsFrom,
    demoFrom: demo?.value === true ? demo.from : undefined,
    simInstances: { n, from: sim?.from },
  }
}
