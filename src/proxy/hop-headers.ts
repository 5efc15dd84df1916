// Hop-by-hop headers apply to one connection and must not be forwarded (RFC 9110 section
// 7.6.1): Connection, the headers it names, and the classic list below. HTTP/2 pseudo
// headers (":path" …) belong to the client's stream and are dropped as well. Expect is
// answered by the router itself (100-continue), and undici refuses to send it.
import { util } from 'undici'

const HOP_BY_HOP = new Set([
  'connection',
  'keep-alive',
  'proxy-connection',
  'proxy-authenticate',
  'proxy-authorization',
  'te',
  'trailer',
  'transfer-encoding',
  'upgrade',
  'http2-settings',
  'expect',
])

const NONE: ReadonlySet<string> = new Set()

/** The names Connection lists beyond the hop-by-hop ones (usually none: `keep-alive`, `close`). */
export function connectionTokens(value: unknown): ReadonlySet<string> {
  // The two values nearly every request and answer carry, before any string is made.
  if (value === undefined || value === 'keep-alive' || value === 'close') return NONE
  if (typeof value === 'string' && HOP_BY_HOP.has(value.trim().toLowerCase())) return NONE
  const out = new Set<string>()
  const list = Array.isArray(value) ? value : typeof value === 'string' ? [value] : []
  for (const v of list) for (const t of String(v).split(',')) out.add(t.trim().toLowerCase())
  return out
}

/**
 * Headers as undici's dispatch and writeHead take them with least work: name, value, name,
 * value… A header with several values is that many pairs, which both write as so many lines.
 */
export type HeaderList = string[]

/**
 * Whether a header of a request or answer applies to its connection alone: pseudo headers,
 * hop-by-hop ones and the names its Connection header lists (see connectionTokens).
 */
export function isConnectionHeader(name: string, named: ReadonlySet<string>): boolean {
  return name.charCodeAt(0) === 0x3a || HOP_BY_HOP.has(name) || named.has(name)
}

/**
 * An instance's raw answer headers (undici's [name, value, …] buffers) as the list writeHead
 * takes, in one pass: names lowercased, values latin1, a repeated header kept as repeated
 * pairs (Node writes them as separate lines, as an array value would be), hop-by-hop ones
 * dropped, and the instance's own of the names in `ours` dropped for ours, appended last.
 */
export function endToEndRaw(raw: readonly (Buffer | string)[], ours: Readonly<Record<string, string>>): HeaderList {
  const out: HeaderList = []
  let connection: string[] | undefined
  for (let i = 0; i < raw.length; i += 2) {
    const name = util.headerNameToString(raw[i]!)
    const value = raw[i + 1]!.toString('latin1')
    if (name === 'connection') (connection ??= []).push(value)
    // A header named __proto__ is dropped, as it always was when headers were gathered in an object.
    if (HOP_BY_HOP.has(name) || name.charCodeAt(0) === 0x3a || name === '__proto__' || Object.hasOwn(ours, name)) continue
    out.push(name, value)
  }
  // Rare: Connection naming headers beyond the hop-by-hop ones.
  if (connection !== undefined) {
    const named = connectionTokens(connection.length === 1 ? connection[0] : connection)
    if (named.size > 0) return withoutNames(out, named, ours)
  }
  for (const name in ours) out.push(name, ours[name]!)
  return out
}

function withoutNames(list: HeaderList, names: ReadonlySet<string>, ours: Readonly<Record<string, string>>): HeaderList {
  const out: HeaderList = []
  for (let i = 0; i < list.length; i += 2) if (!names.has(list[i] as string)) out.push(list[i]!, list[i + 1]!)
  for (const name in ours) out.push(name, ours[name]!)
  return out
}

/** The first value of a header (name lowercase) in a list, or undefined. */
export function valueOf(list: HeaderList, name: string): string | undefined {
  for (let i = 0; i < list.length; i += 2) if (list[i] === name) return list[i + 1]
  return undefined
}
