// Hop-by-hop headers apply to one connection and must not be forwarded (RFC 9110 section
// 7.6.1): Connection, the headers it names, and the classic list below. HTTP/2 pseudo
// headers (":path" …) belong to the client's stream and are dropped as well. Expect is
// answered by the router itself (100-continue), and undici refuses to send it.
import type { IncomingHttpHeaders } from 'node:http'
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
function connectionTokens(value: unknown): ReadonlySet<string> {
  // The two values nearly every request and answer carry, before any string is made.
  if (value === undefined || value === 'keep-alive' || value === 'close') return NONE
  if (typeof value === 'string' && HOP_BY_HOP.has(value.trim().toLowerCase())) return NONE
  const out = new Set<string>()
  const list = Array.isArray(value) ? value : typeof value === 'string' ? [value] : []
  for (const v of list) for (const t of String(v).split(',')) out.add(t.trim().toLowerCase())
  return out
}

/** Headers to forward, without hop-by-hop ones, pseudo headers, and the names in `drop`. */
export function endToEnd(headers: IncomingHttpHeaders | Record<string, string | string[] | undefined>, drop: readonly string[] = []): Record<string, string | string[]> {
  const named = connectionTokens(headers.connection)
  const out: Record<string, string | string[]> = {}
  // for-in rather than Object.entries: no array per header on every request.
  for (const name in headers) {
    const value = headers[name]
    if (value === undefined) continue
    const n = name.toLowerCase()
    if (n.startsWith(':') || HOP_BY_HOP.has(n) || named.has(n) || drop.includes(n)) continue
    out[n] = value
  }
  return out
}

/**
 * endToEnd(util.parseHeaders(raw)) in one pass over undici's raw answer headers, with no
 * intermediate object: names lowercased, repeated ones gathered into arrays, values latin1.
 */
export function endToEndRaw(raw: readonly Buffer[]): Record<string, string | string[]> {
  const out: Record<string, string | string[]> = {}
  let connection: string[] | undefined
  for (let i = 0; i < raw.length; i += 2) {
    const name = util.headerNameToString(raw[i]!)
    const value = raw[i + 1]!.toString('latin1')
    if (name === 'connection') (connection ??= []).push(value)
    // A header named __proto__ would set the object's prototype: dropped, as endToEnd's copy drops it.
    if (HOP_BY_HOP.has(name) || name.charCodeAt(0) === 0x3a || name === '__proto__') continue
    if (!Object.hasOwn(out, name)) {
      out[name] = value
      continue
    }
    const prior = out[name]!
    if (typeof prior === 'string') out[name] = [prior, value]
    else prior.push(value)
  }
  // Rare: Connection naming headers beyond the hop-by-hop ones.
  if (connection !== undefined) for (const n of connectionTokens(connection.length === 1 ? connection[0] : connection)) delete out[n]
  return out
}
