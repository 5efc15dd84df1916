// Reading a few samples out of a Prometheus text exposition without parsing the rest of it.
// An engine's /metrics is tens of KB, mostly histogram buckets; the router wants a handful of
// lines. Each family is found by searching the bytes for its name at the start of a line (a
// native search) and read to the end of its group of lines: the cost is the search up to it,
// not a parse of the body. The bytes may be the start of a body still arriving: a family is
// then known only once its group has ended within them.

/** A metric family to look for: its name, and the name as it starts a line. */
export class Family {
  readonly name: string
  readonly bytes: Buffer
  /** The name preceded by a newline: a sample line anywhere but the first. */
  readonly atLineStart: Buffer

  constructor(name: string) {
    this.name = name
    this.bytes = Buffer.from(name, 'latin1')
    this.atLineStart = Buffer.from(`\n${name}`, 'latin1')
  }
}

export interface Samples {
  /** Samples of the family with a finite value (any labels). */
  count: number
  /** Their values summed, the largest (-Infinity when none) and the smallest (Infinity when none). */
  sum: number
  max: number
  min: number
  /** The first value that is not a finite number, as written (NaN, +Inf, garbage); undefined when there is none. */
  bad: string | undefined
  /**
   * Whether the bytes tell the whole family: its group of lines ended within them, or they are
   * the whole body (`final`). False while more of the body may add to it.
   */
  complete: boolean
}

const LBRACE = 0x7b
const RBRACE = 0x7d
const QUOTE = 0x22
const BACKSLASH = 0x5c
const SPACE = 0x20
const TAB = 0x09
const LF = 0x0a
const CR = 0x0d

/** Whether the line at `at` starts with `name`: 1 yes, 0 no, -1 the bytes end before it can tell. */
function startsWith(buf: Uint8Array, at: number, name: Buffer): 1 | 0 | -1 {
  const n = Math.min(name.length, buf.length - at)
  for (let k = 0; k < n; k++) if (buf[at + k] !== name[k]) return 0
  return n === name.length ? 1 : -1
}

/**
 * The samples of one family in `buf`: lines `name value`, `name{labels} value` (an optional
 * timestamp after the value is ignored). Comment lines (`# HELP name`, `# TYPE name`) and
 * longer names that start with this one (`name_total`) are not samples of it. The text format
 * gives a family's lines as one group, so the scan ends at the first line after its samples
 * that is not one. `final`: `buf` is the whole body (a last line without a newline counts);
 * else only whole lines are read.
 */
export function scanSamples(buf: Buffer, family: Family, final = true): Samples {
  const out: Samples = { count: 0, sum: 0, max: -Infinity, min: Infinity, bad: undefined, complete: final }
  const { bytes: name, atLineStart } = family
  const n = buf.length
  let i = startsWith(buf, 0, name) === 1 ? 0 : buf.indexOf(atLineStart)
  if (i > 0 || (i === 0 && buf[0] === LF)) i++
  let inGroup = false
  while (i >= 0) {
    // Only whole lines, unless this is the whole body.
    let end = buf.indexOf(LF, i)
    if (end < 0) {
      if (!final) return out
      end = n
    }
    let p = i + name.length
    let c = buf[p]
    let sample = c === SPACE || c === TAB
    if (c === LBRACE) {
      // Label values are quoted and may hold spaces, braces and escaped quotes.
      let quoted = false
      for (p++; p < end; p++) {
        c = buf[p]
        if (quoted) {
          if (c === BACKSLASH) p++
          else if (c === QUOTE) quoted = false
        } else if (c === QUOTE) quoted = true
        else if (c === RBRACE) break
      }
      sample = p < end && c === RBRACE
      p++
    }
    if (sample) {
      inGroup = true
      while (p < end && (buf[p] === SPACE || buf[p] === TAB)) p++
      const start = p
      while (p < end && (c = buf[p]) !== SPACE && c !== TAB && c !== CR) p++
      const raw = buf.toString('latin1', start, p)
      const v = raw.length === 0 ? NaN : Number(raw)
      if (Number.isFinite(v)) {
        out.count++
        out.sum += v
        if (v > out.max) out.max = v
        if (v < out.min) out.min = v
      } else out.bad ??= raw
    } else if (inGroup) {
      out.complete = true
      return out
    }
    if (inGroup) {
      // The group goes on while the next line is one of its samples.
      if (end >= n) return out
      const next = startsWith(buf, end + 1, name)
      if (next === 0) {
        out.complete = true
        return out
      }
      if (next === -1 && !final) return out
      i = next === 1 ? end + 1 : -1
    } else {
      const next = buf.indexOf(atLineStart, end)
      i = next < 0 ? -1 : next + 1
    }
  }
  return out
}

/** Sum of a family's finite samples over all its label sets in a whole body; undefined when it has none. */
export function sumSamples(buf: Buffer, family: Family): number | undefined {
  const s = scanSamples(buf, family)
  return s.count > 0 ? s.sum : undefined
}
