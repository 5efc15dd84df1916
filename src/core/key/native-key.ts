// The routing key of a chat or completions body read natively from its bytes: one call
// validates the whole body as JSON.parse would and writes the routing text that openAIRequest
// builds, already as the UTF-8 Router.pick hashes, so that neither a parsed tree nor the
// prompt as a JS string is ever made. Bodies it does not take ('invalid' or 'unsupported')
// go to openAIRequest, which gives the exact error or result.
import { ABI } from '../abi.js'
import { native, type NativeHandle } from '../native.js'
import type { OpenAIApi } from './openai-key.js'

interface KeyBinding {
  /**
   * io in: [api (0 chat | 1 completions), span, prefix, maxDepth, outOffset, blockBytes, hash
   * (0 | 1)]; io out: the results (native/bind_key.cc). Numbers go through io rather than as
   * arguments: each argument read is a crossing of its own, a typed array's slot next to nothing.
   */
  key_extract(body: Uint8Array, out: Uint8Array, io: Float64Array, tenant?: string): number
}

/** @internal the bindings of native/bind_key.cc */
export const keyBinding = native as unknown as KeyBinding

/**
 * Routing text extracted natively: the UTF-8 of its first `span` code points (a lone
 * surrogate as U+FFFD), exactly as Router.pick converts the string openAIRequest returns.
 * Router.pick takes it in place of that string.
 */
export class ExtractedKey extends Uint8Array {
  // Methods that make a new array (subarray, slice, map) make plain ones: the marks below
  // describe this text only.
  static get [Symbol.species](): Uint8ArrayConstructor {
    return Uint8Array
  }

  /** Bytes of the first prefixLength code points: the part the consistent hash places by. */
  readonly keyBytes: number
  /** Chat: bytes up to the end of the first user message (longest_prefix hashes only those). */
  readonly anchorBytes: number | undefined
  /**
   * The extraction also wrote the routing hashes after the text (NativeKeyOptions.hash). The
   * pick uses them when they were made for its router's parameters and tenant, and hashes the
   * text otherwise, so a key whose hashes went stale (a reload) still routes as its text does.
   * The hashes are of the text as extracted: a key's bytes are not to be written to.
   */
  readonly hashed: boolean

  /** A view of `length` bytes of `buffer` at `byteOffset`: the key does not copy its text. */
  constructor(buffer: ArrayBuffer, byteOffset: number, length: number, keyBytes: number, anchorBytes: number | undefined, hashed = false) {
    super(buffer, byteOffset, length)
    this.keyBytes = keyBytes
    this.anchorBytes = anchorBytes
    this.hashed = hashed
  }

  /** A key over a copy of `text` (one that crossed threads, for instance); its pick hashes the text. */
  static copyOf(text: Uint8Array, keyBytes: number, anchorBytes: number | undefined): ExtractedKey {
    const own = new Uint8Array(text)
    return new ExtractedKey(own.buffer, 0, own.length, keyBytes, anchorBytes)
  }
}

export interface NativeRequest {
  key: ExtractedKey
  model: string | undefined
  /** Unchecked: tenantOf validates it, as for the TypeScript path. */
  promptCacheKey: string | undefined
  stream: boolean
}

export type NativeOutcome = { status: 'ok'; request: NativeRequest } | { status: 'invalid' | 'unsupported' }

export interface NativeKeyOptions {
  /** Code points of text wanted: textSpan(prefixLength, strategy, matchLength). */
  span: number
  prefixLength: number
  /** Nesting beyond this is left to the TypeScript path. */
  maxDepth: number
  /**
   * Hash the key for the pick during the scan, while its bytes are in cache, for a router
   * with these parameters (besides prefixLength and span).
   */
  hash?: KeyHashing | undefined
}

export interface KeyHashing {
  /**
   * The tenant header's value (it comes before the body), or undefined when the request has
   * none: then the body's prompt_cache_key is the tenant, as in tenantOf.
   */
  tenant: string | undefined
  /** longest_prefix's blockSize, whose chain is hashed as well; 0 for the other strategies. */
  blockBytes: number
}

const K = ABI.keyMeta
const API: Partial<Record<OpenAIApi, number>> = K.apis

/** The APIs the native extraction reads; the others always take the TypeScript path. */
export const nativeApis = Object.keys(API) as OpenAIApi[]

// A KeyHashes record (native/key/bindings.h), and up to 7 bytes of alignment before it.
const HASHES_BYTES = ABI.keyHashes.align - 1 + ABI.keyHashes.bytes
// Keys are written into slabs and handed out as views, as Buffer hands out small buffers from
// its pool: a typed array of its own costs an external allocation (measured: 2-3 µs for 4 KiB,
// as much as the whole scan of an 8 KiB body), a view of a slab next to nothing. A slab lives
// until the last key in it is collected, so it is kept small: a long-lived request (a stream)
// holds at most this much beside its own body.
const SLAB_BYTES = 64 * 1024

// A string member's value from its token: most are plain text between the quotes; one with
// escapes is decoded by JSON.parse itself, so it cannot differ.
function stringAt(body: Uint8Array, begin: number, end: number, escaped: boolean): string | undefined {
  if (end <= begin) return undefined
  const raw = Buffer.isBuffer(body) ? body : Buffer.from(body.buffer, body.byteOffset, body.byteLength)
  return escaped ? (JSON.parse(raw.toString('utf8', begin, end)) as string) : raw.toString('utf8', begin + 1, end - 1)
}

/** A member's string, made again only when its token's generation is not the last one seen. */
class TokenString {
  #gen = 0
  #value: string | undefined

  get(body: Uint8Array, begin: number, end: number, escaped: boolean, gen: number): string | undefined {
    if (gen !== 0 && gen === this.#gen) return this.#value
    this.#gen = gen
    return (this.#value = stringAt(body, begin, end, escaped))
  }
}

/**
 * The extraction's state, one per thread (the module's `nativeRequest` uses one): the slab keys
 * are written into, key_extract's io (the call's numbers in; ten results out, then the
 * generations of the model and prompt_cache_key tokens, TokenMemo in native/bind_key.cc, so
 * that a token the same as the last one's is not made into a string again), and those strings.
 */
export class KeyExtractor {
  readonly #meta = new Float64Array(K.words)
  #slab = new Uint8Array(0)
  #used = 0
  readonly #model = new TokenString()
  readonly #cacheKey = new TokenString()

  extract(api: OpenAIApi, body: Uint8Array, o: NativeKeyOptions): NativeOutcome {
    const code = API[api]
    if (code === undefined) return { status: 'unsupported' }
    const prefix = Math.min(o.prefixLength, o.span)
    // The text is never longer than the body (see out_capacity in native/key/openai_key.h).
    const text = Math.min(o.span * 4, body.length)
    const h = o.hash
    // The hashes follow the text: the record and the chain, one word per whole block.
    const room = h === undefined ? text : text + HASHES_BYTES + (h.blockBytes > 0 ? Math.floor(text / h.blockBytes) * 8 : 0)
    if (this.#slab.length - this.#used < room) {
      this.#slab = new Uint8Array(Buffer.allocUnsafeSlow(Math.max(SLAB_BYTES, room)).buffer)
      this.#used = 0
    }
    const meta = this.#meta
    const slab = this.#slab
    const used = this.#used
    meta[K.api] = code
    meta[K.span] = o.span
    meta[K.prefix] = prefix
    meta[K.maxDepth] = o.maxDepth
    meta[K.outOffset] = used
    meta[K.blockBytes] = h === undefined ? 0 : h.blockBytes
    meta[K.hash] = h === undefined ? 0 : 1
    const status = keyBinding.key_extract(body, slab, meta, h?.tenant)
    if (status === K.status.invalid) return { status: 'invalid' }
    if (status !== K.status.ok) return { status: 'unsupported' }
    const len = meta[K.textBytes]!
    const hashes = meta[K.hashBytes]!
    const anchor = meta[K.anchorBytes]!
    const key = new ExtractedKey(slab.buffer, slab.byteOffset + used, len, meta[K.keyBytes]!, anchor < 0 ? undefined : anchor, hashes > 0)
    this.#used = used + ((len + hashes + 7) & ~7)
    const escapes = meta[K.escapes]!
    const model = this.#model.get(body, meta[K.modelBegin]!, meta[K.modelEnd]!, (escapes & K.escapedModel) !== 0, meta[K.modelGeneration]!)
    const promptCacheKey = this.#cacheKey.get(body, meta[K.cacheKeyBegin]!, meta[K.cacheKeyEnd]!, (escapes & K.escapedCacheKey) !== 0, meta[K.cacheKeyGeneration]!)
    return { status: 'ok', request: { key, model, promptCacheKey, stream: meta[K.stream] === 1 } }
  }
}

const extractor = new KeyExtractor()

export function nativeRequest(api: OpenAIApi, body: Uint8Array, o: NativeKeyOptions): NativeOutcome {
  return extractor.extract(api, body, o)
}
