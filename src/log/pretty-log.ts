// --log-format pretty: each JSON line pino writes, rewritten for a person reading a terminal:
//   2026-05-04T12:00:00.123Z INFO  request POST /v1/chat/completions 200 sim-1 12.3ms requestId=… endpoint=default …
// time, level, message, then every other field as key=value (quoted when it has a space, a
// quote or an =; objects as dotted keys). An access-log line shows its method, path, status,
// instance and duration first, bare. An error's stack follows its line, indented. Written by
// hand rather than with pino-pretty (19 packages, 2 MB installed), whose one-line form shows
// the fields as a JSON object: the key=value line would have been ours to write all the same.
import type { DestinationStream } from 'pino'

const LEVELS: Readonly<Record<number, string>> = { 10: 'TRACE', 20: 'DEBUG', 30: 'INFO ', 40: 'WARN ', 50: 'ERROR', 60: 'FATAL' }
/** ANSI colours of the levels, on a terminal only: grey, cyan, green, yellow, red, magenta. */
const COLOURS: Readonly<Record<number, string>> = { 10: '90', 20: '36', 30: '32', 40: '33', 50: '31', 60: '35' }

/** pino's own keys: in the line's head, or left out (pid and hostname are the same on every line). */
const OWN = new Set(['level', 'time', 'msg', 'pid', 'hostname'])
/** The access logs' messages (serve's, access-log.ts; epp's, exchange.ts), and the fields their head shows in this order. */
const ACCESS_MSGS = new Set(['request', 'epp request'])
const ACCESS_HEAD = new Set(['method', 'path', 'status', 'instance', 'ms'])

/** A value as key=value shows it: bare when it needs no quoting, else as a JSON string. */
function text(v: string): string {
  return v !== '' && /^[^\s"=\\\x00-\x1f\x7f]+$/.test(v) ? v : JSON.stringify(v)
}

type Json = null | boolean | number | string | Json[] | { [k: string]: Json }

/** `key=value` pairs of one field; an object becomes one pair per leaf, as `key.sub=value`. */
function pairs(key: string, v: Json, out: string[]): void {
  if (v === null || typeof v !== 'object') out.push(`${key}=${typeof v === 'string' ? text(v) : String(v)}`)
  else if (Array.isArray(v)) out.push(`${key}=${text(JSON.stringify(v))}`)
  else {
    const entries = Object.entries(v)
    if (entries.length === 0) out.push(`${key}={}`)
    for (const [k, sub] of entries) pairs(`${key}.${k}`, sub, out)
  }
}

/** An error as pino serializes it ({ type, message, stack }): its message in the line, its stack below. */
function isSerializedError(v: Json): v is { message: string; stack: string; [k: string]: Json } {
  return v !== null && typeof v === 'object' && !Array.isArray(v) && typeof v.message === 'string' && typeof v.stack === 'string'
}

/**
 * One JSON log line as a readable one (without its newline); a line that is not a JSON object
 * is given back as it came.
 */
export function prettyLine(line: string, colour = false): string {
  let o: Record<string, Json>
  try {
    const parsed = JSON.parse(line) as Json
    if (parsed === null || typeof parsed !== 'object' || Array.isArray(parsed)) return line
    o = parsed
  } catch {
    return line
  }
  const head: string[] = []
  if (typeof o.time === 'number') head.push(new Date(o.time).toISOString())
  else if (typeof o.time === 'string') head.push(o.time)
  const level = typeof o.level === 'number' ? (LEVELS[o.level] ?? `L${o.level}`) : String(o.level ?? '')
  head.push(colour && typeof o.level === 'number' && COLOURS[o.level] !== undefined ? `\x1b[${COLOURS[o.level]}m${level}\x1b[39m` : level)
  const msg = typeof o.msg === 'string' ? o.msg : ''
  if (msg !== '') head.push(msg)
  const access = ACCESS_MSGS.has(msg) && o.method !== undefined && o.status !== undefined
  if (access) {
    head.push(String(o.method), String(o.path ?? ''), String(o.status), typeof o.instance === 'string' ? o.instance : '-')
    if (typeof o.ms === 'number') head.push(`${o.ms}ms`)
  }
  const fields: string[] = []
  const stacks: string[] = []
  for (const [k, v] of Object.entries(o)) {
    if (OWN.has(k) || (access && ACCESS_HEAD.has(k))) continue
    if (isSerializedError(v)) {
      fields.push(`${k}=${text(v.message)}`)
      stacks.push(...v.stack.split('\n').slice(1).map((l) => `    ${l.trim()}`))
    } else pairs(k, v, fields)
  }
  const first = [...head, ...fields].join(' ')
  return stacks.length === 0 ? first : `${first}\n${stacks.join('\n')}`
}

/** Whether the pretty lines get coloured levels: stdout a terminal, and NO_COLOR unset (no-color.org). */
export function colourful(): boolean {
  return process.stdout.isTTY === true && !process.env.NO_COLOR
}

/**
 * A pino destination that writes each line it gets to `inner` (serve's batched stdout) as
 * prettyLine makes it. Flushes go through to `inner`, so a pending batch still goes out at exit.
 */
export function prettyDestination(inner: DestinationStream & { flush?(cb?: (err?: Error) => void): void; flushSync?(): void }, colour = colourful()): DestinationStream & { flushSync(): void } {
  return {
    write(chunk: string | Buffer) {
      const s = typeof chunk === 'string' ? chunk : chunk.toString('utf8')
      let out = ''
      let from = 0
      for (let nl = s.indexOf('\n'); nl !== -1; nl = s.indexOf('\n', from)) {
        if (nl > from) out += `${prettyLine(s.slice(from, nl), colour)}\n`
        from = nl + 1
      }
      if (from < s.length) out += `${prettyLine(s.slice(from), colour)}\n`
      inner.write(out)
    },
    flush: (cb?: (err?: Error) => void) => (inner.flush !== undefined ? inner.flush(cb) : cb?.()),
    flushSync: () => inner.flushSync?.(),
  } as DestinationStream & { flushSync(): void }
}
