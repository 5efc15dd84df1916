// A pino line of fixed fields written as bytes into one scratch buffer: byte for byte what
// pino writes for `log.info(fields, msg)`, without the strings pino builds for every key and
// value (a few KiB per line, more than the rest of a request's logging). It writes only
// values that need no JSON escaping (ASCII but control characters, `"` and `\`), for loggers
// that would not change the fields on the way (redaction, serializers, formatters.log, a
// mixin, hooks); for anything else it declines and the caller logs through pino as before.
import { pino, type DestinationStream, type Logger } from 'pino'

// msgPrefixSym is missing from pino's types, not from pino.
const S = pino.symbols as typeof pino.symbols & { readonly msgPrefixSym: symbol }
type Internals = Record<symbol, unknown>

/** Marks a destination whose write() takes a line as a Buffer it may keep: spares turning the bytes into a string. */
export const WRITES_BYTES = Symbol('writes line bytes')

/** A line longer than this is left to pino. */
const CAPACITY = 4096
const scratch = Buffer.allocUnsafeSlow(CAPACITY)
/** Bytes written so far, or -1 once the line is given up. */
let at = 0

const ref = pino({ level: 'silent' }, { write() {} }) as unknown as Internals
const plainLoggers = new WeakMap<object, { keys: readonly string[]; plain: boolean }>()

/** Whether pino would write `keys` of this logger's lines exactly as given. */
function plain(log: Logger, keys: readonly string[]): boolean {
  const known = plainLoggers.get(log)
  if (known?.keys === keys) return known.plain
  const l = log as unknown as Internals
  const hooks = l[S.hooksSym] as { logMethod?: unknown; streamWrite?: unknown }
  const formatters = l[S.formattersSym] as { log?: unknown }
  const serializers = l[S.serializersSym] as Record<string, unknown>
  const stream = l[S.streamSym] as Internals
  const yes =
    l[S.writeSym] === ref[S.writeSym] &&
    l[S.asJsonSym] === ref[S.asJsonSym] &&
    !l[S.mixinSym] &&
    !l[S.nestedKeySym] &&
    typeof l[S.msgPrefixSym] !== 'string' &&
    !hooks.logMethod &&
    !hooks.streamWrite &&
    !formatters.log &&
    Reflect.ownKeys(l[S.stringifiersSym] as object).length === 0 &&
    !keys.includes(l[S.errorKeySym] as string) &&
    keys.every((k) => serializers[k] === undefined) &&
    stream[S.needsMetadataGsym] !== true
  plainLoggers.set(log, { keys, plain: yes })
  return yes
}

/**
 * Starts a line for `log` at pino's level `level`, or returns false when the logger is not
 * one whose lines this can write (then nothing is to be written here).
 */
export function begin(log: Logger, level: string, keys: readonly string[]): boolean {
  if (!plain(log, keys)) return false
  const l = log as unknown as Internals
  at = 0
  raw((l[S.lsCacheSym] as Record<number, string>)[log.levels.values[level]!]!)
  const time = l[S.timeSym] as () => string
  if (time === pino.stdTimeFunctions.epochTime) {
    raw(',"time":')
    number(Date.now())
  } else raw(time())
  raw(l[S.chindingsSym] as string)
  return true
}

/** Ends the line with its message and writes it; false when it was given up (nothing written). */
export function finish(log: Logger, msg: string): boolean {
  const l = log as unknown as Internals
  raw(',"')
  raw(l[S.messageKeySym] as string)
  raw('":')
  text(msg)
  raw(l[S.endSym] as string)
  if (at < 0) return false
  const stream = l[S.streamSym] as DestinationStream & { [WRITES_BYTES]?: true }
  if (stream[WRITES_BYTES]) {
    const line = Buffer.allocUnsafe(at)
    // Byte by byte: a copy of part of a buffer makes a view of that part first.
    for (let i = 0; i < at; i++) line[i] = scratch[i]!
    stream.write(line as unknown as string)
  } else stream.write(scratch.toString('latin1', 0, at))
  return true
}

/** Text that is JSON already (pino's own pieces, its line end included): copied as it is, if ASCII. */
function raw(s: string): void {
  if (at < 0) return
  const n = s.length
  if (at + n > CAPACITY) return void (at = -1)
  for (let i = 0; i < n; i++) {
    const c = s.charCodeAt(i)
    if (c > 0x7f) return void (at = -1)
    scratch[at++] = c
  }
}

/** A string value, quoted: one that needs escaping gives the line up. */
function text(s: string): void {
  if (at < 0) return
  const n = s.length
  if (at + n + 2 > CAPACITY) return void (at = -1)
  scratch[at++] = 0x22
  for (let i = 0; i < n; i++) {
    const c = s.charCodeAt(i)
    if (c < 0x20 || c > 0x7f || c === 0x22 || c === 0x5c) return void (at = -1)
    scratch[at++] = c
  }
  scratch[at++] = 0x22
}

/**
 * A number as pino writes it (String(v), null when not finite). Integers and tenths, the
 * log's counts and durations, are spelled here digit by digit; others (rare) through String.
 */
function number(v: number): void {
  if (at < 0) return
  if (!Number.isFinite(v)) return raw('null')
  let tenths = Math.round(v * 10)
  // For a tenth of an integer below 2^53/10 the shortest decimal that reads back as it, which
  // String gives, has one decimal (none for an integer).
  if (tenths / 10 !== v || Math.abs(tenths) >= 1e15) return raw(String(v))
  if (at + 18 > CAPACITY) return void (at = -1)
  if (tenths < 0) {
    scratch[at++] = 0x2d
    tenths = -tenths
  }
  const tenth = tenths % 10
  let int = (tenths - tenth) / 10
  const from = at
  do {
    scratch[at++] = 0x30 + (int % 10)
    int = Math.floor(int / 10)
  } while (int > 0)
  reverse(from, at)
  if (tenth !== 0) {
    scratch[at++] = 0x2e
    scratch[at++] = 0x30 + tenth
  }
}

function reverse(from: number, to: number): void {
  for (let i = from, j = to - 1; i < j; i++, j--) {
    const c = scratch[i]!
    scratch[i] = scratch[j]!
    scratch[j] = c
  }
}

/** `,"key":"value"`, left out when value is undefined, as pino leaves it out. */
export function str(key: string, value: string | undefined): void {
  if (value === undefined) return
  field(key)
  text(value)
}

/** `,"key":value`, left out when value is undefined. */
export function num(key: string, value: number | undefined): void {
  if (value === undefined) return
  field(key)
  number(value)
}

/** `,"key":true`, left out when false. */
export function flag(key: string, value: boolean): void {
  if (!value) return
  field(key)
  raw('true')
}

/** The three writers above, as one value to hand them around in. */
export const bytes = { str, num, flag }

function field(key: string): void {
  raw(',')
  text(key)
  raw(':')
}
