// A BPE in JavaScript runs at tens of MB/s, and a replay tokenizes tens of thousands of
// prompts of 32-48 KB that mostly repeat: the same documents, conversation histories that
// grow by one turn, trace blocks. So a prompt is cut into segments that are tokenized
// once and remembered.
//
// Where it is cut: after a run of newlines (and '/') whose next character is not a
// newline or '/', when either
//   - the next character is not whitespace, or
//   - the run follows a character that is neither whitespace, letter, number nor mark
//     (punctuation, symbols: " .\n\n" ending a hash-id trace block, say).
// o200k's pre-tokenizer never joins text across such a point. Its pieces are
//   letters   [^\r\n\p{L}\p{N}]?[\p{Lu}\p{Lt}\p{Lm}\p{Lo}\p{M}]*[\p{Ll}\p{Lm}\p{Lo}\p{M}]+ (or the other
//             case order), with a contraction: never hold a newline;
//   numbers   \p{N}{1,3};
//   symbols   ` ?[^\s\p{L}\p{N}]+[\r\n/]*`: a run of symbols then every newline and '/'
//             after it, so it ends exactly at the point in the second case;
//   spaces    `\s*[\r\n]+`, `\s+(?!\S)`, `\s+`: whitespace, ending at the first
//             non-whitespace character at the latest, so at the point in the first case
//             (`\s*[\r\n]+` is tried first, so the lookahead never decides where it ends).
// A symbol right before the run cannot start a letters piece (no letter follows it) and is
// no letter or mark that one could end with, so it is in a symbols piece. So no piece
// starts before the point and ends after it, and none looks behind: the pieces, hence the
// tokens, of the whole are those of the segments one after another. Whitespace after a
// newline that follows a letter is not a point: in "a\n  \nb", `\s*[\r\n]+` takes
// "\n  \n" as one piece. test/sim/tokenizer.test.ts checks all this against encode().
import { xxh3 } from '../core/hash.js'

// Newlines are found with indexOf (a vectorized search) and the checks around them done
// by hand: a regex scan of every character costs as much as a cache hit.
const SPACE = /\s/
const SYMBOL = /^[^\s\p{L}\p{N}\p{M}]$/u

/** Where `encode` may cut `text` (see above): the segments, in order; they join to `text`. */
export function segments(text: string): string[] {
  const out: string[] = []
  const n = text.length
  let start = 0
  let lf = text.indexOf('\n')
  let cr = text.indexOf('\r')
  while (lf >= 0 || cr >= 0) {
    const run = lf < 0 ? cr : cr < 0 ? lf : Math.min(lf, cr)
    let end = run + 1
    for (let c = text.charCodeAt(end); c === LF || c === CR || c === SLASH; c = text.charCodeAt(++end));
    if (lf >= 0 && lf < end) lf = text.indexOf('\n', end)
    if (cr >= 0 && cr < end) cr = text.indexOf('\r', end)
    if (end >= n || text.charCodeAt(end - 1) === SLASH) continue
    if (SPACE.test(text[end]!) && !SYMBOL.test(charBefore(text, run))) continue
    out.push(text.slice(start, end))
    start = end
  }
  if (start < n || out.length === 0) out.push(text.slice(start))
  return out
}

const LF = 0x0a
const CR = 0x0d
const SLASH = 0x2f

/** The code point before the '/' characters that end at `i` ('' at the start). */
function charBefore(text: string, i: number): string {
  while (i > 0 && text.charCodeAt(i - 1) === SLASH) i--
  if (i === 0) return ''
  const low = text.charCodeAt(i - 1)
  const pair = low >= 0xdc00 && low <= 0xdfff && i >= 2 && (text.charCodeAt(i - 2) & 0xfc00) === 0xd800
  return text.slice(pair ? i - 2 : i - 1, i)
}

interface Entry {
  key: string | number
  /** The segment, copied flat: a slice would keep the whole prompt it came from alive. */
  text: string
  ids: Uint32Array
  /** Neighbours in recency order (older, newer). */
  older: Entry | null
  newer: Entry | null
}

// The budget is in tokens. An entry's memory is its ids (4 bytes a token), its text (a byte
// or two a character: ~10 bytes a token in all for English) and a fixed overhead, counted
// here as 16 tokens so that many tiny segments cannot hide behind a small token count.
const ENTRY_OVERHEAD = 16

export const DEFAULT_SEGMENT_CACHE_TOKENS = 16 * 1024 * 1024

/**
 * `encode` of whole texts, from the cached tokens of their segments. Least recently used
 * segments are dropped once the cached tokens (plus a small per-entry overhead) pass
 * `maxTokens`. A hit is exact: short segments are their own keys, long ones are found by a
 * 52-bit XXH3 and checked against their text (V8 hashes a string over 16 K characters by
 * its length alone, so same-length documents would share one bucket).
 */
export class SegmentCache {
  private readonly entries = new Map<string | number, Entry>()
  // A list in recency order rather than Map order (delete and re-insert on every hit): V8
  // leaves a hole per Map delete, and walking from the oldest entry would step over them.
  private oldest: Entry | null = null
  private newest: Entry | null = null
  private cost = 0
  hits = 0
  misses = 0

  constructor(
    private readonly encodeSegment: (text: string) => ArrayLike<number>,
    readonly maxTokens = DEFAULT_SEGMENT_CACHE_TOKENS,
  ) {}

  /** Segments cached now. */
  get size(): number {
    return this.entries.size
  }

  /** Tokens cached now (without the per-entry overhead). */
  get tokens(): number {
    return this.cost - this.entries.size * ENTRY_OVERHEAD
  }

  encode(text: string): Uint32Array {
    const parts = segments(text)
    if (parts.length === 1) return this.segment(parts[0]!)
    const ids = parts.map((s) => this.segment(s))
    let total = 0
    for (const p of ids) total += p.length
    const out = new Uint32Array(total)
    let at = 0
    for (const p of ids) {
      out.set(p, at)
      at += p.length
    }
    return out
  }

  private segment(text: string): Uint32Array {
    if (text.length === 0) return EMPTY
    const key = text.length < HASHED ? text : Number(BigInt.asUintN(52, xxh3(text)))
    const found = this.entries.get(key)
    if (found !== undefined && found.text === text) {
      this.hits++
      this.unlink(found)
      this.append(found)
      return found.ids
    }
    this.misses++
    const ids = Uint32Array.from(this.encodeSegment(text))
    const cost = ids.length + ENTRY_OVERHEAD
    if (cost > this.maxTokens / 4) return ids // one segment must not flush the cache
    if (found !== undefined) this.drop(found) // a 52-bit collision: the newer text wins
    const flat = flatCopy(text)
    const e: Entry = { key: typeof key === 'string' ? flat : key, text: flat, ids, older: null, newer: null }
    this.entries.set(e.key, e)
    this.append(e)
    this.cost += cost
    while (this.cost > this.maxTokens && this.oldest !== null) this.drop(this.oldest)
    return ids
  }

  private append(e: Entry): void {
    e.older = this.newest
    e.newer = null
    if (this.newest !== null) this.newest.newer = e
    else this.oldest = e
    this.newest = e
  }

  private unlink(e: Entry): void {
    if (e.older !== null) e.older.newer = e.newer
    else this.oldest = e.newer
    if (e.newer !== null) e.newer.older = e.older
    else this.newest = e.older
  }

  private drop(e: Entry): void {
    this.unlink(e)
    this.entries.delete(e.key)
    this.cost -= e.ids.length + ENTRY_OVERHEAD
  }
}

const EMPTY = new Uint32Array(0)
/** Segments from this length on are keyed by a hash: below it, V8's own string hash is cheaper than a native call. */
const HASHED = 1024
const ONE_BYTE = /^[\0-\xff]*$/

// A fresh string with the same code units: latin1 keeps one-byte strings one byte a
// character, utf16le round-trips anything else (lone surrogates included).
function flatCopy(s: string): string {
  const enc = ONE_BYTE.test(s) ? 'latin1' : 'utf16le'
  return Buffer.from(s, enc).toString(enc)
}
