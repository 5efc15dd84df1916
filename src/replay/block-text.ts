// Text for the blocks of a hash-id trace: each id becomes a block of exactly B tokens under
// the replay's tokenizer, the same text every time it appears and differing from every
// other id's block within its first 28 bytes, so a prefix cache, a routing key or a peer's
// text tree sees in the text exactly the sharing the ids describe.
//
// Each id reads one stream of words: TAG_WORDS words that name it, then words drawn from
// an Rng seeded by it. Every word in VOCABULARY, with its leading space, is one o200k_base
// token, and the words run from 2 to 14 bytes, so o200k's 16-token blocks end at byte
// offsets scattered over every residue mod 64 rather than on the router's 64-byte grid: a
// replay under `o200k` then checks prefix routing whose blocks do not line up with the
// engine's, which is what that tokenizer is for (under `bytes` they line up by
// construction). How much of the stream a block holds depends on the tokenizer:
//
//   o200k   B−1 words + " .\n\n"                          (B units, one token each)
//   bytes   the stream's first 4·B−4 bytes + " .\n\n"     (4·B bytes, cut mid-word at will)
//
// Under o200k the pre-tokenizer splits before every space-led lowercase word and keeps the
// "\n\n" with the ".", so BPE never merges across units and the tokens of a concatenation
// of blocks are the concatenation of the blocks' tokens. The end is one token, lets the
// simulator's segment cache cut between blocks (so each block is tokenized once), and keeps
// a block's end from reading as a sentence running into the next. Under `bytes` the count
// is positional, so the words need not be whole. A block cut to k tokens keeps its first
// k units (o200k) or 4·k bytes (bytes): a prefix of the full block, so two prompts that
// share an id share its text however either is cut.
//
// The tag is a bijection of the id into words of TAG_VOCABULARY, the first 256 of the
// vocabulary, each of 1 to 3 letters. Distinct ids have distinct tags, and the space before
// every word makes a word sequence readable from its text, so two blocks differ within
// their tags: within the first 28 bytes, whatever the tokenizer, the block size or what
// follows. Short words keep the whole tag inside the smallest `bytes` block (8 tokens, 28
// bytes before the end) and inside the router's first 64-byte block. It is a permutation of
// the id rather than the id itself so that neighbouring ids, which traces are full of, do
// not share leading words either; 7 base-256 digits cover 56 bits, so every id a trace may
// hold (a non-negative safe integer, < 2^53) has a tag of its own.
import type { TokenizerName } from '../sim/tokenizers/index.js'
import { Rng } from './rng.js'

/**
 * 1,024 common English words, each a single o200k_base token with a leading space
 * (test/replay/block-text.test.ts checks it), picked by o200k rank within each length.
 * The first 256, of 1 to 3 letters, are the tag's digits; the rest run from 4 to 13
 * letters, mostly short, as text does. A power of two so that a draw is 10 bits.
 */
export const VOCABULARY: readonly string[] = (
  'a in to of is on be an as it he or if at we do by me us go so no up my am oh hi ox the and for ' +
  'are but not you all any can had her was one our out day get has him his how man new now old see ' +
  'two way who boy did its let put say she too use act add age ago aid aim air art ask bad bag bar ' +
  'bed big bit box bus buy car cat cup cut dog dry due ear eat egg end eye far fat few fit fix fly ' +
  'fun gas god gun guy hat hit hot ice ill job key kid lay leg lie lot low map may mix mom net nor ' +
  'odd off oil own pay per pen pet pop pot raw red rid row run sad sea set sit six sky son sun tax ' +
  'tea ten tie tip toe top toy try van war wet win yes yet zoo arm bid bow cow cry dad dig dot fan ' +
  'fee fig fur gap gym hay hen hid hip hug hum ink jam jar jaw jet joy kit lab lap law lid lip log ' +
  'mad mat mud nap nut oak owl pad pan pat paw pie pig pin pit ram rat ray rib rod rug sat saw sew ' +
  'shy sin sip sir ski sly sob sow spy sum tab tag tan tap tin ton tub tug vet wax web wig wit yak ' +
  'yam zip ace ant ape apt axe bat bee ' +
  'with that this from your have will more part they self time over work else also some data when ' +
  'year like name need just been true them real what type were into make list than back only form ' +
  'look best most find help want long read test know well hand then user pass very case good down ' +
  'post high even file mark many much said used here play item last word text does sign home such ' +
  'free take view size show week book call cent made each open line next life care same site main ' +
  'must game fact rest term plus both page love come cost path port full head feel team mill sure ' +
  'keep days room link hard code plan date left base area body give kind echo turn fore able less ' +
  'grow sent blog door lead comb meet done away cell easy food past four mind seem side class ' +
  'their about which other there value would false first start under final every right these where ' +
  'after could while years event print great child break model using check world think again point ' +
  'being place found super order state those array local style error still month offer going build ' +
  'color stand level field small table range three water input power index catch group might count ' +
  'total image since email allow never title video money price match await short visit today based ' +
  'light label times along begin throw enjoy house exist cover given width block large needs float ' +
  'thing learn valid until treat clean items means often makes later quick night story below store ' +
  'space press study extra major games media write favor teach hours comes women share above least ' +
  'focus close track click doing clear music users human known front heart young watch bring query ' +
  'phone enter added works terms return public result import string inform static person people ' +
  'should number differ before online design system create method custom follow expect intern ' +
  'really object direct around market report client second access effect health invest things ' +
  'always change during review little better school family double within search assert social ' +
  'record action target update making course moment source employ called status amount having ' +
  'single govern height simple output select either values please author enough become player ' +
  'others button throws friend reason season across period future offers dating option handle ' +
  'common global though months length strong points series choose happen window unique device ' +
  'render accept energy parent column format server engine member weight answer normal issues ' +
  'needed events switch regard taking delete center screen wonder impact remove cannot actual ' +
  'except rights living travel private through require product program current because process ' +
  'support service develop request default between without project content company message protect ' +
  'present perform website success account element control special provide another extends contact ' +
  'address looking context options console version include working quality already against results ' +
  'perfect certain thought display problem getting connect initial details several country example ' +
  'members writing created comment discuss subject network started minutes whether respect install ' +
  'friends history someone popular million article various general reading express suggest correct ' +
  'session natural feature command comfort percent believe receive further changes forward however ' +
  'student similar running nothing regular usually deliver reviews digital section related players ' +
  'prevent machine virtual concern returns clients function business document response consider ' +
  'interest services required material personal products children position possible research ' +
  'software property download students together original actually specific features continue ' +
  'question instance location provided complete industry addition previous override register ' +
  'expected customer provides password received anything training internet building platform ' +
  'selected language everyone includes yourself contract problems designed template standard ' +
  'probably increase approach security official purchase included progress learning solution ' +
  'computer multiple national database comments programs activity patients remember practice ' +
  'discover resource favorite recently analysis directly projects starting elements decision ' +
  'different available important including something following protected community represent ' +
  'questions relations character companies customers beautiful interface implement component ' +
  'potential difficult marketing financial currently recommend condition according transform ' +
  'knowledge published resources treatment transport education materials excellent exception ' +
  'insurance necessary equipment selection effective attention essential situation structure ' +
  'countries providing direction container solutions operation certainly reference statement ' +
  'developed functions sometimes undefined specified otherwise experience profession understand ' +
  'individual particular everything collection government technology background conditions ' +
  'management additional connection especially production throughout activities implements ' +
  'properties associated completely themselves successful interested considered definitely ' +
  'parameters commercial difference characters businesses components investment correspond ' +
  'protection increasing population restaurant operations information application development ' +
  'environment performance description significant distributed opportunity individuals constructor ' +
  'interesting traditional comfortable immediately responsible appropriate placeholder experienced ' +
  'temperature transaction established experiences independent alternative professional ' +
  'relationship requirements applications organization construction particularly distribution ' +
  'successfully technologies instructions conversation installation international understanding ' +
  'opportunities communication configuration '
).trim().split(' ')

/** The words a tag is spelled in: one per byte of the id's permutation. */
export const TAG_VOCABULARY: readonly string[] = VOCABULARY.slice(0, 256)
/** Bytes per token under `bytes`. */
export const BYTES_PER_TOKEN = 4
/** Ends every whole block: one o200k token, and a paragraph break before the next block. */
export const BLOCK_END = ' .\n\n'
/** Words of the tag that names the id. */
export const TAG_WORDS = 7
/** The smallest block: the tag and the end. */
export const MIN_BLOCK_TOKENS = TAG_WORDS + 1
/** The longest tag, in bytes: 7 words of at most 3 letters and their spaces. */
export const MAX_TAG_BYTES = 28

const WORD_BITS = 10
const WORD_MASK = (1 << WORD_BITS) - 1
if (VOCABULARY.length !== 1 << WORD_BITS || new Set(VOCABULARY).size !== VOCABULARY.length) throw new Error('VOCABULARY must be 1,024 distinct words')
if (VOCABULARY.some((w, i) => !(i < 256 ? /^[a-z]{1,3}$/ : /^[a-z]+$/).test(w))) {
  throw new Error('VOCABULARY must be lowercase words, the first 256 of 1 to 3 letters')
}

// The words with their spaces, back to back, and where each starts: a block is written a
// byte at a time from here (words are a few bytes: a copy call per word costs twice as much).
const WORD_TEXT = new Uint8Array(Buffer.from(VOCABULARY.map((w) => ` ${w}`).join(''), 'latin1'))
const WORD_START = new Uint16Array(VOCABULARY.length + 1)
for (let i = 0, at = 0; i <= VOCABULARY.length; i++) {
  WORD_START[i] = at
  if (i < VOCABULARY.length) at += VOCABULARY[i]!.length + 1
}
const MAX_WORD_BYTES = Math.max(...VOCABULARY.map((w) => w.length + 1))
const END = new Uint8Array(Buffer.from(BLOCK_END, 'latin1'))

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

// One buffer for every block being written (blocks are made one at a time, synchronously).
let scratch = new Uint8Array(64 * 1024)

/**
 * Writes the start of id's stream into `scratch`: `words` words, or (words = Infinity) words
 * until at least `bytes` bytes are written, the last possibly running past. Returns the
 * bytes written.
 */
function writeStream(id: number, words: number, bytes: number): number {
  const most = (words === Infinity ? bytes + MAX_WORD_BYTES : words * MAX_WORD_BYTES) + END.length
  if (scratch.length < most) scratch = new Uint8Array(Math.max(most, 2 * scratch.length))
  const out = scratch
  let at = 0
  let n = 0
  const tag = tagBytes(id)
  const rng = new Rng(id, 'block-text')
  let r = 0
  while (n < words && at < bytes) {
    let w: number
    if (n < TAG_WORDS) w = tag[n]!
    else {
      // One draw gives three words.
      const k = (n - TAG_WORDS) % 3
      if (k === 0) r = rng.u32()
      w = (r >>> (k * WORD_BITS)) & WORD_MASK
    }
    for (let i = WORD_START[w]!, end = WORD_START[w + 1]!; i < end; i++) out[at++] = WORD_TEXT[i]!
    n++
  }
  return at
}

/**
 * The text of block `id`: exactly `tokens` tokens (≥ MIN_BLOCK_TOKENS) under `tokenizer`,
 * ASCII, ending in BLOCK_END.
 */
export function blockText(id: number, tokens: number, tokenizer: TokenizerName): string {
  if (!Number.isSafeInteger(id) || id < 0) throw new RangeError(`a block id must be a non-negative safe integer; got ${id}`)
  if (!Number.isInteger(tokens) || tokens < MIN_BLOCK_TOKENS) throw new RangeError(`a block must have at least ${MIN_BLOCK_TOKENS} tokens; got ${tokens}`)
  let at: number
  if (tokenizer === 'o200k') at = writeStream(id, tokens - 1, Infinity)
  else {
    // The end overwrites whatever of the last word ran past.
    at = tokens * BYTES_PER_TOKEN - END.length
    writeStream(id, Infinity, at)
  }
  scratch.set(END, at)
  return Buffer.from(scratch.buffer, scratch.byteOffset, at + END.length).toString('latin1')
}

/**
 * The first `tokens` tokens of a block's `text` under `tokenizer`: its first `tokens`
 * units under o200k (a unit starts at each space), its first 4·tokens bytes under `bytes`.
 */
export function cutBlock(text: string, tokens: number, tokenizer: TokenizerName): string {
  if (tokenizer !== 'o200k') return text.slice(0, tokens * BYTES_PER_TOKEN)
  let at = 0
  for (let k = 0; k < tokens && at >= 0; k++) at = text.indexOf(' ', at + 1)
  return at < 0 ? text : text.slice(0, at)
}

interface Entry {
  id: number
  text: string
  prev: Entry | null
  next: Entry | null
}

/**
 * Block texts for one block size and tokenizer, the most recently used kept (a trace can
 * name millions of ids; texts are made again when needed rather than held forever), and
 * prompts assembled from them.
 */
export class BlockTexts {
  // Recency as a doubly linked list (head: least recent): moving an entry costs no Map
  // delete, and V8 leaves a hole per delete that Map iteration then walks over.
  private readonly cache = new Map<number, Entry>()
  private head: Entry | null = null
  private tail: Entry | null = null
  private chars = 0

  constructor(
    readonly blockTokens: number,
    readonly tokenizer: TokenizerName,
    /** Characters of text to keep (default 32 MB: ~16,000 blocks of 512 tokens under `bytes`, ~10,000 under o200k). */
    private readonly maxChars = 32 * 2 ** 20,
  ) {
    if (!Number.isInteger(blockTokens) || blockTokens < MIN_BLOCK_TOKENS) {
      throw new RangeError(`blocks must have at least ${MIN_BLOCK_TOKENS} tokens; got ${blockTokens}`)
    }
  }

  /** Blocks held now. */
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
    const text = blockText(id, this.blockTokens, this.tokenizer)
    // The newest block is always kept, whatever its size.
    while (this.head !== null && this.chars + text.length > this.maxChars) {
      const oldest = this.head
      this.unlink(oldest)
      this.cache.delete(oldest.id)
      this.chars -= oldest.text.length
    }
    e = { id, text, prev: null, next: null }
    this.cache.set(id, e)
    this.append(e)
    this.chars += text.length
    return text
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
   * is left. The caller has checked that `ids` has ceil(inputTokens / blockTokens) entries.
   */
  prompt(ids: readonly number[], inputTokens: number): string {
    const n = ids.length
    const parts = new Array<string>(n)
    for (let i = 0; i < n; i++) parts[i] = this.block(ids[i]!)
    const last = inputTokens - (n - 1) * this.blockTokens
    if (n > 0 && last < this.blockTokens) parts[n - 1] = cutBlock(parts[n - 1]!, last, this.tokenizer)
    return parts.join('')
  }
}
