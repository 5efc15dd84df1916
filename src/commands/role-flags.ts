// Instances with a role from the command line, as vLLM's and SGLang's routers take them:
// `--prefill URL [BOOTSTRAP_PORT]` (repeatable, the port optional and positional) and
// `--decode URL`; their variables hold comma-separated entries, each `URL` or `URL PORT`.
import { ConfigError } from '../config/config.js'
import { upstreamUrlProblem } from '../config/upstream-url.js'
import { CliError } from '../command-line/cli-error.js'

/** A flag's value and what the user typed to give it. */
interface Given {
  value: string | string[] | boolean
  from: string
}

const ROLE_FLAGS = new Set(['--prefill', '--decode'])
/** What may follow a role flag's URL as its own: a port, or SGLang's `none` (no port). */
const PORT_WORD = /^(\d+|none)$/i

/**
 * node:util parseArgs gives a flag one value, and would take `8998` in `--prefill URL 8998`
 * for a stray positional: the port is joined to the URL before parsing (`URL 8998`, one
 * value). `--decode URL 8998` is joined too, so that it is refused by name, not as a stray.
 */
export function joinBootstrapPorts(argv: readonly string[]): string[] {
  const out: string[] = []
  for (let i = 0; i < argv.length; i++) {
    const a = argv[i]!
    if (a === '--') {
      out.push(...argv.slice(i))
      break
    }
    const inline = a.indexOf('=')
    const flag = inline > 0 ? a.slice(0, inline) : a
    if (!ROLE_FLAGS.has(flag)) {
      out.push(a)
      continue
    }
    // `--prefill URL PORT` or `--prefill=URL PORT`: the value, then the word after it.
    const value = inline > 0 ? a.slice(inline + 1) : argv[i + 1]
    const next = inline > 0 ? argv[i + 1] : argv[i + 2]
    if (value === undefined || next === undefined || !PORT_WORD.test(next)) {
      out.push(a)
      continue
    }
    out.push(flag, `${value} ${next}`)
    i += inline > 0 ? 1 : 2
  }
  return out
}

export interface RoleInstance {
  url: string
  role: 'prefill' | 'decode'
  bootstrapPort?: number
}

function list(g: Given): string[] {
  return Array.isArray(g.value) ? g.value : [String(g.value)]
}

/** One `URL` or `URL PORT` entry of `--prefill` or `--decode` (or their variables). */
function parseEntry(g: Given, role: 'prefill' | 'decode', text: string): RoleInstance {
  const parts = text.trim().split(/\s+/).filter(Boolean)
  const what = role === 'prefill' ? 'a URL and an optional bootstrap port (URL PORT)' : 'a URL only'
  if (parts.length === 0 || parts.length > 2) throw new CliError(`${g.from} takes ${what}; got '${text}'`)
  const [url, port] = parts as [string, string | undefined]
  const p = upstreamUrlProblem(url)
  if (p !== undefined) {
    const meant = p.meant === undefined ? '' : g.from.startsWith('--') ? ` (did you mean ${g.from} ${p.meant}?)` : ` (did you mean ${p.meant}?)`
    throw new ConfigError(`${g.from} ${p.problem}; got '${url}'${meant}`)
  }
  if (port === undefined || /^none$/i.test(port)) return { url, role }
  if (role === 'decode') throw new CliError(`${g.from} takes a URL only: a bootstrap port belongs to a prefill instance; got '${text}'`)
  const n = /^\d+$/.test(port) ? Number(port) : NaN
  if (!(n >= 1 && n <= 65535)) throw new CliError(`${g.from} ${url}: the bootstrap port (SGLang's --disaggregation-bootstrap-port) must be 1-65535 or none; got '${port}'`)
  return { url, role, bootstrapPort: n }
}

/**
 * The instances `--prefill` and `--decode` give, refusing a URL given two roles (among them
 * and `--upstream`, whose instances do both).
 */
export function roleInstances(prefill: Given | undefined, decode: Given | undefined, upstream: { urls: string[]; from: string } | undefined): RoleInstance[] {
  const out: RoleInstance[] = []
  for (const [g, role] of [
    [prefill, 'prefill'],
    [decode, 'decode'],
  ] as const) {
    if (g !== undefined) for (const text of list(g)) out.push(parseEntry(g, role, text))
  }
  const seen = new Map<string, { role: string; from: string }>()
  const id = (u: string) => u.replace(/\/+$/, '')
  for (const u of upstream?.urls ?? []) seen.set(id(u), { role: 'both', from: upstream!.from })
  for (const i of out) {
    const from = i.role === 'prefill' ? prefill!.from : decode!.from
    const had = seen.get(id(i.url))
    if (had !== undefined && had.role !== i.role) {
      throw new CliError(`${id(i.url)} is given with ${had.from} and ${from}: an instance has one role (one that does both prefill and decode: give it with --upstream only)`)
    }
    seen.set(id(i.url), { role: i.role, from })
  }
  return out
}

/** The variable's entries: comma-separated (a space separates an entry's URL from its port). */
export function entriesFromEnv(v: string): string[] {
  return v
    .split(',')
    .map((e) => e.trim())
    .filter(Boolean)
}
