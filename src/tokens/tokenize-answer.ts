// vLLM's /tokenize answer ({"count": N, "max_model_len": M, "tokens": [ids...], ...}) read as
// its bytes arrive, into a Uint32Array, under a bound on the ids taken from the request. Parsed
// whole with JSON.parse, a 20 MB answer of 10M ids held the event loop 1.2 s and took RSS to
// 719 MB (the text, its UTF-16 copy and an array of 10M numbers); read chunk by chunk, each
// chunk costs its own bytes' worth of work and the answer never exists as text.
//
// Only what the router uses is read: the 'tokens' array (integers from 0 to 2^32-1, nothing
// else) and 'count', which must agree with it. Every other member is skipped by its structure
// (strings, nested arrays and objects, literals), without checking its contents.

/**
 * Tokens the engine may add beyond one per byte of the /tokenize request: its chat template's
 * own text and special tokens (BOS, role markers, a built-in system prompt, a date line, the
 * generation prompt). The templates of common models add tens to a few hundred; this is a
 * generous cap. See maxTokenIds.
 */
export const SPECIAL_TOKEN_ALLOWANCE = 4096

/**
 * The most ids an honest answer to a /tokenize request of `requestBytes` (its JSON body, in
 * UTF-8 bytes) can hold. Every text the engine tokenizes is in that body (the messages or the
 * prompt, the tools), as JSON, which spells a text in at least as many bytes as its UTF-8 (escapes
 * only lengthen it). A byte-level BPE tokenizer (GPT-2's, Llama 3's, Qwen's, o200k) makes each
 * token of at least one byte of text, and SentencePiece with byte fallback at most one token a
 * byte; so the text gives at most `requestBytes` ids. The chat template's markers around each
 * message are paid for by the message's own JSON ({"role":"user","content":""} is 28 bytes);
 * what the body does not carry is the template's fixed text, SPECIAL_TOKEN_ALLOWANCE. An answer
 * past the bound is refused and the request routed on the approximate view, so a tokenizer
 * that did exceed it (a normalizer expanding characters) costs the exact view for that request,
 * not the request.
 */
export function maxTokenIds(requestBytes: number): number {
  return requestBytes + SPECIAL_TOKEN_ALLOWANCE
}

/** Bytes of JSON per id at most: 10 digits (2^32-1), a comma and a space. */
const BYTES_PER_ID = 12
/** The rest of the answer: count, max_model_len, token_strs: null and whatever fields vLLM adds. */
const ANSWER_OVERHEAD_BYTES = 16 * 1024

/** The largest answer holding at most `maxIds` ids: a longer one is refused as it arrives. */
export function maxAnswerBytes(maxIds: number): number {
  return maxIds * BYTES_PER_ID + ANSWER_OVERHEAD_BYTES
}

const enum S {
  Start,
  KeyOrEnd,
  Key,
  KeyEscape,
  Colon,
  Value,
  IdsStart,
  IdNext,
  InId,
  AfterId,
  Count,
  SkipString,
  SkipStringEscape,
  SkipNested,
  SkipNestedString,
  SkipNestedEscape,
  SkipLiteral,
  AfterValue,
  Done,
  Failed,
}

const isSpace = (c: number) => c === 0x20 || c === 0x0a || c === 0x0d || c === 0x09
const isDigit = (c: number) => c >= 0x30 && c <= 0x39

/** One answer's reader: push() each chunk, then end(). A failure is a sentence, as the tokenizer logs it. */
export class TokenizeAnswer {
  #s = S.Start
  #key = ''
  #ids: Uint32Array
  #n = 0
  /** The id being read. */
  #id = 0
  #count: number | undefined
  #countText = ''
  #tokens = false
  #nested = 0
  #failure: string | undefined

  /** Refused for holding more than maxIds ids (else, when refused, it is malformed). */
  tooMany = false

  constructor(readonly maxIds: number) {
    this.#ids = new Uint32Array(Math.min(maxIds, 1024))
  }

  /** Reads a chunk; a sentence once the answer is known to be refused (later chunks are ignored). */
  push(b: Uint8Array): string | undefined {
    if (this.#failure !== undefined) return this.#failure
    for (let i = 0; i < b.length; i++) {
      const c = b[i]!
      switch (this.#s) {
        case S.Start:
          if (isSpace(c)) break
          if (c !== 0x7b) return this.#fail('not JSON')
          this.#s = S.KeyOrEnd
          break
        case S.KeyOrEnd:
          if (isSpace(c)) break
          if (c === 0x7d) this.#s = S.Done
          else if (c === 0x22) {
            this.#key = ''
            this.#s = S.Key
          } else return this.#fail('not JSON')
          break
        case S.Key:
          // Keys are compared to ASCII names; a key past their length is some other member's.
          if (c === 0x22) this.#s = S.Colon
          else if (c === 0x5c) this.#s = S.KeyEscape
          else if (this.#key.length < 16) this.#key += String.fromCharCode(c)
          break
        case S.KeyEscape:
          this.#key += '\\'
          this.#s = S.Key
          break
        case S.Colon:
          if (isSpace(c)) break
          if (c !== 0x3a) return this.#fail('not JSON')
          this.#s = S.Value
          break
        case S.Value:
          if (isSpace(c)) break
          if (this.#key === 'tokens') {
            if (c !== 0x5b || this.#tokens) return this.#fail("no 'tokens' array")
            this.#tokens = true
            this.#s = S.IdsStart
          } else if (this.#key === 'count') {
            this.#countText = String.fromCharCode(c)
            this.#s = S.Count
          } else if (c === 0x22) this.#s = S.SkipString
          else if (c === 0x7b || c === 0x5b) {
            this.#nested = 1
            this.#s = S.SkipNested
          } else this.#s = S.SkipLiteral
          break
        case S.IdsStart:
          // After '[': the first id, or ']' for an empty array.
          if (isSpace(c)) break
          if (c === 0x5d) this.#s = S.AfterValue
          else if (isDigit(c)) this.#startId(c)
          else return this.#badId()
          break
        case S.IdNext:
          // After a comma: an id must follow.
          if (isSpace(c)) break
          if (isDigit(c)) this.#startId(c)
          else return this.#badId()
          break
        case S.InId:
          if (isDigit(c)) {
            this.#id = this.#id * 10 + (c - 0x30)
            if (this.#id >= 2 ** 32) return this.#badId()
          } else if (c === 0x2c || c === 0x5d || isSpace(c)) {
            if (!this.#take()) return this.#failure!
            this.#s = c === 0x2c ? S.IdNext : c === 0x5d ? S.AfterValue : S.AfterId
          } else return this.#badId()
          break
        case S.AfterId:
          if (isSpace(c)) break
          if (c === 0x2c) this.#s = S.IdNext
          else if (c === 0x5d) this.#s = S.AfterValue
          else return this.#badId()
          break
        case S.Count:
          if (c === 0x2c || c === 0x7d || isSpace(c)) {
            this.#count = Number(this.#countText)
            if (this.#countText.length > 20 || !/^(0|[1-9][0-9]*)$/.test(this.#countText)) return this.#fail(`count ${this.#countText.slice(0, 20)}, not a count`)
            this.#s = S.AfterValue
            i--
          } else if (this.#countText.length <= 20) this.#countText += String.fromCharCode(c)
          break
        case S.SkipString:
          if (c === 0x22) this.#s = S.AfterValue
          else if (c === 0x5c) this.#s = S.SkipStringEscape
          break
        case S.SkipStringEscape:
          this.#s = S.SkipString
          break
        case S.SkipNested:
          if (c === 0x22) this.#s = S.SkipNestedString
          else if (c === 0x7b || c === 0x5b) this.#nested++
          else if ((c === 0x7d || c === 0x5d) && --this.#nested === 0) this.#s = S.AfterValue
          break
        case S.SkipNestedString:
          if (c === 0x22) this.#s = S.SkipNested
          else if (c === 0x5c) this.#s = S.SkipNestedEscape
          break
        case S.SkipNestedEscape:
          this.#s = S.SkipNestedString
          break
        case S.SkipLiteral:
          if (c === 0x2c || c === 0x7d || isSpace(c)) {
            this.#s = S.AfterValue
            i--
          }
          break
        case S.AfterValue:
          if (isSpace(c)) break
          if (c === 0x2c) this.#s = S.KeyOrEnd
          else if (c === 0x7d) this.#s = S.Done
          else return this.#fail('not JSON')
          break
        case S.Done:
          if (!isSpace(c)) return this.#fail('not JSON')
          break
      }
    }
    return undefined
  }

  #startId(c: number): void {
    this.#id = c - 0x30
    this.#s = S.InId
  }

  #badId(): string {
    return this.#fail(`a bad id: tokens[${this.#n}] is not a token id (an integer from 0 to ${2 ** 32 - 1})`)
  }

  /** The id read is kept, within the bound. */
  #take(): boolean {
    if (this.#n === this.maxIds) {
      this.tooMany = true
      this.#fail(`more than ${this.maxIds} ids, more than the request can have`)
      return false
    }
    if (this.#n === this.#ids.length) {
      const grown = new Uint32Array(Math.min(this.maxIds, this.#ids.length * 2))
      grown.set(this.#ids)
      this.#ids = grown
    }
    this.#ids[this.#n++] = this.#id
    return true
  }

  #fail(why: string): string {
    this.#s = S.Failed
    this.#failure = why
    return why
  }

  /** The ids, once the whole answer has been pushed; else why it is refused. */
  end(): Uint32Array | string {
    if (this.#failure !== undefined) return this.#failure
    if (this.#s !== S.Done) return this.#s === S.Start ? 'not JSON' : 'not JSON (it ends early)'
    if (!this.#tokens) return "no 'tokens' array"
    if (this.#count !== undefined && this.#count !== this.#n) return `count ${this.#count} for ${this.#n} tokens`
    // A copy when the array grew past the ids: the cache keeps it, and should not keep the slack.
    return this.#n === this.#ids.length ? this.#ids : this.#ids.slice(0, this.#n)
  }
}
