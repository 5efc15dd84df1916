// Reading a few samples out of a Prometheus text exposition without parsing the rest of it.
// An engine's /metrics is tens of KB, mostly histogram buckets; the router wants a handful of
// lines. Each family is found by searching for its name at the start of a line (a native
// string search), so the cost is one pass of memchr-like scanning per family, not a parse.

/** A metric family to look for: its name, and the name as it starts a line. */
export class Family {
  readonly name: string
  /** The name preceded by a newline: a sample line anywhere but the first. */
  readonly atLineStart: string

  constructor(name: string) {
    this.name = name
    this.atLineStart = `\n${name}`
  }
}

export interface Samples {
  /** Samples of the family with a finite value (any labels). */
  count: number
  /** Their values summed, and the largest (-Infinity when none). */
  sum: number
  max: number
  /** The first value that is not a finite number, as written (NaN, +Inf, garbage); undefined when there is none. */
  bad: string | undefined
}

const LBRACE = 0x7b
const RBRACE = 0x7d
const QUOTE = 0x22
const BACKSLASH = 0x5c
const SPACE = 0x20
const TAB = 0x09
const LF = 0x0a
const CR = 0x0d

/**
 * The samples of one family: lines `name value`, `name{labels} value` (an optional timestamp
 * after the value is ignored). Comment lines (`# HELP name`, `# TYPE name`) and longer names
 * that start with this one (`name_total`) are not samples of it.
 */
export function scanSamples(text: string, family: Family): Samples {
  const out: Samples = { count: 0, sum: 0, max: -Infinity, bad: undefined }
  const { name, atLineStart } = family
  let i = 0
  if (!text.startsWith(name)) {
    const first = text.indexOf(atLineStart)
    i = first < 0 ? -1 : first + 1
  }
  const n = text.length
  while (i >= 0) {
    let p = i + name.length
    let c = text.charCodeAt(p)
    let sample = c === SPACE || c === TAB
    if (c === LBRACE) {
      // Label values are quoted and may hold spaces, braces and escaped quotes.
      let quoted = false
      for (p++; p < n; p++) {
        c = text.charCodeAt(p)
        if (c === LF) break // a label set never spans lines: not a sample
        if (quoted) {
          if (c === BACKSLASH) p++
          else if (c === QUOTE) quoted = false
        } else if (c === QUOTE) quoted = true
        else if (c === RBRACE) break
      }
      sample = c === RBRACE
      p++
    }
    if (sample) {
      while (p < n && (text.charCodeAt(p) === SPACE || text.charCodeAt(p) === TAB)) p++
      const start = p
      while (p < n && (c = text.charCodeAt(p)) !== SPACE && c !== TAB && c !== LF && c !== CR) p++
      const raw = text.slice(start, p)
      const v = raw.length === 0 ? NaN : Number(raw)
      if (Number.isFinite(v)) {
        out.count++
        out.sum += v
        if (v > out.max) out.max = v
      } else out.bad ??= raw
    }
    const next = text.indexOf(atLineStart, p)
    i = next < 0 ? -1 : next + 1
  }
  return out
}

/** Sum of a family's finite samples over all its label sets; undefined when it has none. */
export function sumSamples(text: string, family: Family): number | undefined {
  const s = scanSamples(text, family)
  return s.count > 0 ? s.sum : undefined
}
