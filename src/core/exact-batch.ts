// One instance's batch of KV events as the native side applies it in one call
// (ExactIndex.apply): op records, the 64-bit words they take (seeds, parents, engine hashes)
// and the token ids of the stores, each in one typed array that grows and is reused batch
// after batch, so applying a batch makes no array per event.
import { ABI } from './abi.js'
import { OutOfRangeError } from './errors.js'
import { checkU64 } from './u64.js'

const OP = ABI.exact.op
/** Token ids (and a sixteenth as many words) kept between batches: 1 MiB. */
const KEEP_TOKENS = 256 * 1024

export interface SealedBatch {
  blockSize: number
  ops: Float64Array
  count: number
  words: BigUint64Array
  tokens: Uint32Array
  results: Float64Array
}

function grown<T extends Float64Array | BigUint64Array | Uint32Array>(a: T, need: number, make: (n: number) => T): T {
  if (need <= a.length) return a
  const b = make(Math.max(need, a.length * 2))
  b.set(a as never)
  return b
}

export class ExactBatch {
  #ops = new Float64Array(16 * OP.words)
  #count = 0
  #words = new BigUint64Array(256)
  #nwords = 0
  #tokens = new Uint32Array(4096)
  #ntokens = 0
  #results = new Float64Array(16)
  /** Engine hashes the last store or remove still expects (hash()). */
  #owed = 0
  #blockSize = 0

  /** Starts a new batch, its stores of `blockSize` ids a block (the router's exactBlockSize). */
  reset(blockSize: number): this {
    // A huge batch's arrays are not kept for the small ones after it.
    if (this.#tokens.length > KEEP_TOKENS) this.#tokens = new Uint32Array(4096)
    if (this.#words.length > KEEP_TOKENS / 16) this.#words = new BigUint64Array(256)
    this.#count = 0
    this.#nwords = 0
    this.#ntokens = 0
    this.#owed = 0
    this.#blockSize = blockSize
    return this
  }

  /** Ops in the batch. */
  get length(): number {
    return this.#count
  }

  /**
   * A BlockStored of `blocks` blocks: their first blocks × blockSize ids of `tokenIds`, chained
   * from `parent` (the engine hash of the block before, null for none) or else from `seed`. Its
   * `blocks` engine hashes follow through hash().
   */
  store(parent: bigint | null, seed: bigint, tier: 0 | 1, blocks: number, tokenIds: ArrayLike<number>): void {
    const n = blocks * this.#blockSize
    if (tokenIds.length < n) throw new OutOfRangeError('tokenIds', `at least ${n} ids`, tokenIds.length)
    if (parent !== null) checkU64('parent', parent)
    checkU64('seed', seed)
    this.#op(OP.store, tier, blocks, parent === null ? 0 : 1)
    this.#word(seed)
    if (parent !== null) this.#word(parent)
    this.#tokens = grown(this.#tokens, this.#ntokens + n, (k) => new Uint32Array(k))
    const t = this.#tokens
    if (tokenIds.length === n) t.set(tokenIds, this.#ntokens)
    else for (let i = 0; i < n; i++) t[this.#ntokens + i] = tokenIds[i]!
    this.#ntokens += n
  }

  /** A BlockRemoved of `blocks` blocks, whose engine hashes follow through hash(). */
  remove(tier: 0 | 1, blocks: number): void {
    this.#op(OP.remove, tier, blocks, 0)
  }

  /** An AllBlocksCleared. */
  clear(): void {
    this.#op(OP.clear, 0, 0, 0)
  }

  /** The next engine hash (reduced to 64 bits) of the last store or remove. */
  hash(key: bigint): void {
    checkU64('hash', key)
    if (this.#owed === 0) throw new OutOfRangeError('hash', 'one of the blocks the last store or remove named', key)
    this.#owed--
    this.#word(key)
  }

  /** @internal the arrays ExactIndex.apply hands to the native side. */
  sealed(): SealedBatch {
    if (this.#owed !== 0) throw new OutOfRangeError('batch', 'every block of its last op hashed', this.#owed, `the last op of the batch is owed ${this.#owed} engine hashes`)
    this.#results = grown(this.#results, this.#count, (k) => new Float64Array(k))
    return { blockSize: this.#blockSize, ops: this.#ops, count: this.#count, words: this.#words, tokens: this.#tokens, results: this.#results }
  }

  #op(kind: number, tier: 0 | 1, blocks: number, parent: 0 | 1): void {
    if (this.#owed !== 0) throw new OutOfRangeError('batch', 'every block of its last op hashed', this.#owed, `the op before is owed ${this.#owed} engine hashes`)
    this.#ops = grown(this.#ops, (this.#count + 1) * OP.words, (k) => new Float64Array(k))
    const o = this.#count++ * OP.words
    this.#ops[o + OP.kind] = kind
    this.#ops[o + OP.tier] = tier
    this.#ops[o + OP.blocks] = blocks
    this.#ops[o + OP.parent] = parent
    this.#owed = kind === OP.clear ? 0 : blocks
  }

  #word(w: bigint): void {
    this.#words = grown(this.#words, this.#nwords + 1, (k) => new BigUint64Array(k))
    this.#words[this.#nwords++] = w
  }
}
