// One replica's publication on `<prefix>:load`: its own queued prefill per instance of each
// endpoint, in the router's blocks, and its own requests in flight there (for the operators'
// view), as JSON:
//   {"replica":"router-a-41-9f3c2e","seq":812,"ts":1767225600000,
//    "endpoints":{"default":{"http://10.0.0.1:8000":12,"http://10.0.0.2:8000":0}},
//    "inFlight":{"default":{"http://10.0.0.1:8000":3,"http://10.0.0.2:8000":1}}}
// `seq` counts its publications from 0 at its start, `ts` is its wall clock (informational:
// ages are measured on the receiver's clock). A replica that stops cleanly sends `"bye":true`.
// Anything else on the channel is refused by decodeLoad, with the reason, never thrown.

/** Figures by endpoint, then instance. */
export type Figures = Record<string, Record<string, number>>

export interface LoadMessage {
  replica: string
  seq: number
  ts: number
  endpoints: Figures
  inFlight: Figures | undefined
  bye: boolean
}

/** Bounds on what a message may hold: a replica's whole fleet, with room, and no more. */
export const MESSAGE_LIMITS = { bytes: 1 << 20, endpoints: 1024, instances: 4096, replica: 128 } as const

/**
 * The message text. `endpoints` and `inFlight` are passed already as JSON (the publisher
 * compares them with its last publication before deciding to send, so they are built once).
 */
export function encodeLoad(replica: string, seq: number, ts: number, endpointsJson: string, inFlightJson: string): string {
  return `{"replica":${JSON.stringify(replica)},"seq":${seq},"ts":${ts},"endpoints":${endpointsJson},"inFlight":${inFlightJson}}`
}

export function encodeBye(replica: string, seq: number, ts: number): string {
  return `{"replica":${JSON.stringify(replica)},"seq":${seq},"ts":${ts},"endpoints":{},"bye":true}`
}

const isRecord = (v: unknown): v is Record<string, unknown> => typeof v === 'object' && v !== null && !Array.isArray(v)

function figures(v: unknown, what: string): Figures | string {
  if (!isRecord(v)) return `${what} is not an object`
  const eps = Object.keys(v)
  if (eps.length > MESSAGE_LIMITS.endpoints) return `${what} has more than ${MESSAGE_LIMITS.endpoints} endpoints`
  for (const ep of eps) {
    const row = v[ep]
    if (!isRecord(row)) return `${what}.${ep} is not an object`
    const ids = Object.keys(row)
    if (ids.length > MESSAGE_LIMITS.instances) return `${what}.${ep} has more than ${MESSAGE_LIMITS.instances} instances`
    for (const id of ids) {
      const n = row[id]
      if (typeof n !== 'number' || !Number.isSafeInteger(n) || n < 0) return `${what}.${ep}[${JSON.stringify(id)}] is not a whole number of blocks`
    }
  }
  return v as Figures
}

/** The message, or why it is not one. */
export function decodeLoad(text: string): LoadMessage | string {
  if (text.length > MESSAGE_LIMITS.bytes) return `longer than ${MESSAGE_LIMITS.bytes} characters`
  let v: unknown
  try {
    v = JSON.parse(text)
  } catch {
    return 'not JSON'
  }
  if (!isRecord(v)) return 'not a JSON object'
  const { replica, seq, ts } = v
  if (typeof replica !== 'string' || replica.length === 0 || replica.length > MESSAGE_LIMITS.replica) return `replica is not a string of 1-${MESSAGE_LIMITS.replica} characters`
  if (typeof seq !== 'number' || !Number.isSafeInteger(seq) || seq < 0) return 'seq is not a whole number'
  if (typeof ts !== 'number' || !Number.isFinite(ts)) return 'ts is not a number'
  const endpoints = figures(v.endpoints, 'endpoints')
  if (typeof endpoints === 'string') return endpoints
  let inFlight: Figures | undefined
  if (v.inFlight !== undefined) {
    const f = figures(v.inFlight, 'inFlight')
    if (typeof f === 'string') return f
    inFlight = f
  }
  if (v.bye !== undefined && typeof v.bye !== 'boolean') return 'bye is not a boolean'
  return { replica, seq, ts, endpoints, inFlight, bye: v.bye === true }
}

const LEAD = '{"replica":"'

/**
 * The replica id of a message as encodeLoad writes it (the id first, without escapes), read
 * without parsing the rest; undefined for any other text (which decodeLoad then reads whole).
 * What lets a message from a replica that cannot be kept be refused at the cost of its first
 * bytes rather than of a parse.
 */
export function leadingReplica(text: string): string | undefined {
  if (!text.startsWith(LEAD)) return undefined
  const end = text.indexOf('"', LEAD.length)
  if (end < 0 || end - LEAD.length > MESSAGE_LIMITS.replica) return undefined
  const id = text.slice(LEAD.length, end)
  return id.includes('\\') ? undefined : id
}
