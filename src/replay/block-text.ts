// Text for the blocks of a hash-id trace: each id becomes a block of exactly B tokens, the
// same text every time it appears and sharing no leading tokens with any other id's block,
// so a prefix cache, a routing key or a peer's text tree sees in the text exactly the
// sharing the ids describe.
//
// Exact under both of the simulator's tokenizers. A block is made of 4-byte units: words of
// three lowercase ASCII letters each preceded by a space (" the", " and" …) and, last, the
// string " .\n\n". Under `bytes` (4 bytes of UTF-8 = 1 token) every unit is one token. Under
// o200k_base every word in VOCABULARY is a single token with its leading space, " .\n\n" is
// one token too, and the pre-tokenizer splits before every space-led word (the "\n\n" goes
// with the "."), so BPE never merges across units: the tokens of a concatenation of blocks
// are the concatenation of the blocks' tokens. The paragraph break also keeps a block's end
// from reading as the start of a sentence running into the next block.
//
//   block(id) = tag (TAG_WORDS words) + words from an Rng seeded by id + " .\n\n"
//
// The tag is a bijection of the id, so two ids never share their first TAG_WORDS tokens
// (the first 64 bytes of two blocks always differ, whatever follows); it is a permutation
// of the id rather than the id itself so that neighbouring ids, which traces are full of,
// do not share leading words either. 7 base-256 digits cover 56 bits: every id a trace may
// hold (a non-negative safe integer, < 2^53) has a tag of its own.
import { Rng } from './rng.js'

/**
 * 256 common three-letter English words, each a single o200k_base token with a leading
 * space (test/replay/block-text.test.ts checks it). 256 so a word is one byte of a tag.
 */
export const VOCABULARY: readonly string[] = (
  'the and for are but not you all any can had her was one our out ' +
  'day get has him his how man new now old see two way who boy did ' +
  'its let put say she too use act add age ago aid aim air art ask ' +
  'bad bag bar bed big bit box bus buy car cat cup cut dog dry due ' +
  'ear eat egg end eye far fat few fit fix fly fun gas god gun guy ' +
  'hat hit hot ice ill job key kid lay leg lie lot low map may mix ' +
  'mom net nor odd off oil own pay per pen pet pop pot raw red rid ' +
  'row run sad sea set sit six sky son sun tax tea ten tie tip toe ' +
  'top toy try van war wet win yes yet zoo arm bid bow cow cry dad ' +
  'dig dot fan fee fig fur gap gym hay hen hid hip hug hum ink jam ' +
  'jar jaw jet joy kit lab lap law lid lip log mad mat mud nap nut ' +
  'oak owl pad pan pat paw pie pig pin pit ram rat ray rib rod rug ' +
  'sat saw sew shy sin sip sir ski sly sob sow spy sum tab tag tan ' +
  'tap tin ton tub tug vet wax web wig wit yak yam zip ace ant ape ' +
  'apt axe bat bee bog bud bug bun cab cap cod cog con cot cub cue ' +
  'den dew dim din dip doe dug dye eel elf elk elm era eve ewe fad'
).split(' ')

/** Bytes (and characters) per unit, and so per token under `bytes`. */
export const UNIT_BYTES = 4
/** Ends every whole block: one o200k token, and a paragraph break before the next block. */
export const BLOCK_END = ' .\n\n'
/** Words of the tag that names the id. */
export const TAG_WORDS = 7
/** The smallest block: the tag and the end. */
export const MIN_BLOCK_TOKENS = TAG_WORDS + 1

const UNITS = Buffer.from(VOCABULARY.map((w) => ` ${w}`).join(''), 'latin1')
if (VOCABULARY.length !== 256 || UNITS.length !== 256 * UNIT_BYTES) throw new Error('VOCABULARY must be 256 three-letter words')
// Each unit as one 32-bit word in this machine's byte order, so a block is written a unit
// per store: Buffer.copy of 4 bytes a word was most of a long trace's replay time.
const UNIT_WORDS = new Uint32Array(new Uint8Array(UNITS).buffer)
const END_WORD = new Uint32Array(new Uint8Array(Buffer.from(BLOCK_END, 'latin1')).buffer)[0]!

/** The 7 tag bytes of `id`: a 4-round Feistel permutation of 56 bits, as two 28-bit halves. */
export function tagBytes(id: number): number[] {
  let hi = Math.floor(id / 2 ** 28)
  let lo = id % 2 ** 28
  for (let round = 0; round < 4; round++) {
    const t = hi ^ feistel(lo, round)
    hi = lo
    lo = t
  }
  return [hi >>> 20, (hi >>> 12) & 255, (hi >>> 4) & 255, ((hi & 15) << 4) | (lo >>> 24), (lo >>> 16) & 255, (lo >>> 8) & 255, lo & 255]
}

// Any function of a half makes the rounds invertible; a 32-bit avalanche (murmur3's
// finalizer) makes the tags of neighbouring ids look unrelated.
function feistel(x: number, round: number): number {
  let h = (x ^ Math.imul(round + 1, 0x9e3779b1)) | 0
  h = Math.imul(h ^ (h >>> 16), 0x85ebca6b)
  h = Math.imul(h ^ (h >>> 13), 0xc2b2ae35)
  return (h ^ (h >>> 16)) & 0xfffffff
}

/** The text of block `id`: exactly `tokens` tokens (≥ MIN_BLOCK_TOKENS), 4·tokens ASCII characters. */
export function blockText(id: number, tokens: number): string {
  if (!Number.isSafeInteger(id) || id < 0) throw new RangeError(`a block id must be a non-negative safe integer; got ${id}`)
  if (!Number.isInteger(tokens) || tokens < MIN_BLOCK_TOKENS) throw new RangeError(`a block must have at least ${MIN_BLOCK_TOKENS} tokens; got ${tokens}`)
  const out = new Uint32Array(tokens)
  let at = 0
  for (const b of tagBytes(id)) out[at++] = UNIT_WORDS[b]!
  const rng = new Rng(id, 'block-text')
  const end = tokens - 1
  while (at < end) {
    // One draw gives four words (a byte each).
    const r = rng.u32()
    for (let k = 0; k < 4 && at < end; k++) out[at++] = UNIT_WORDS[(r >>> (8 * k)) & 255]!
  }
  out[at] = END_WORD
  return Buffer.from(out.buffer, 0, tokens * UNIT_BYTES).toString('latin1')
}

interface Entry {
  id: number
  text: string
  prev: Entry | null
  next: Entry | null
}

/**
 * Block texts for one block size, the most recently used kept (a trace can name millions
 * of ids; texts are made again when needed rather than held forever), and prompts
 * assembled from them.
 */
export class BlockTexts {
  // Recency as a doubly linked list (head: least recent): moving an entry costs no Map
  // delete, and V8 leaves a hole per delete that Map iteration then walks over.
  private readonly cache = new Map<number, Entry>()
  private head: Entry | null = null
  private tail: Entry | null = null
  private readonly capacity: number

  constructor(
    readonly blockTokens: number,
    /** Characters of text to keep (default 32 MB: 16,384 blocks of 512 tokens). */
    maxChars = 32 * 2 ** 20,
  ) {
    if (!Number.isInteger(blockTokens) || blockTokens < MIN_BLOCK_TOKENS) {
      throw new RangeError(`blocks must have at least ${MIN_BLOCK_TOKENS} tokens; got ${blockTokens}`)
    }
    this.capacity = Math.max(1, Math.floor(maxChars / (blockTokens * UNIT_BYTES)))
  }

  /** Blocks held now (at most the capacity). */
  get size(): number {
    return this.cache.size
  }

  /** The ids held, least recently used first. */
  held(): number[] {
    const out: number[] = []
    for (let e = this.head; e !== null; e = e.next) out.push(e.id)
    return out
  }

  block(id: number): string {
    let e = this.cache.get(id)
    if (e !== undefined) {
      if (e !== this.tail) {
        this.unlink(e)
        this.append(e)
      }
      return e.text
    }
    if (this.cache.size >= this.capacity) {
      const oldest = this.head!
      this.unlink(oldest)
      this.cache.delete(oldest.id)
    }
    e = { id, text: blockText(id, this.blockTokens), prev: null, next: null }
    this.cache.set(id, e)
    this.append(e)
    return e.text
  }

  private unlink(e: Entry): void {
    if (e.prev === null) this.head = e.next
    else e.prev.next = e.next
    if (e.next === null) this.tail = e.prev
    else e.next.prev = e.prev
    e.prev = e.next = null
  }

  private append(e: Entry): void {
    e.prev = this.tail
    if (this.tail === null) this.head = e
    else this.tail.next = e
    this.tail = e
  }

  /**
   * The prompt of `inputTokens` tokens made of `ids` in order, the last block cut to what
   * is left (its first words). The caller has checked that `ids` has
   * ceil(inputTokens / blockTokens) entries.
   */
  prompt(ids: readonly number[], inputTokens: number): string {
    const n = ids.length
    const parts = new Array<string>(n)
    for (let i = 0; i < n; i++) parts[i] = this.block(ids[i]!)
    const last = inputTokens - (n - 1) * this.blockTokens
    if (n > 0 && last < this.blockTokens) parts[n - 1] = parts[n - 1]!.slice(0, last * UNIT_BYTES)
    return parts.join('')
  }
}
