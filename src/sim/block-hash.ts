// Chained block hashes, as vLLM's prefix cache keys blocks: block i's key depends on all
// tokens in blocks 0..i, on the model (or LoRA adapter) and on cache_salt. We hash the
// prompt's bytes in place: every token is 4 bytes (4 bytes of UTF-8 under the `bytes`
// tokenizer, a little-endian token id under `o200k` and for token-id prompts), so a block
// of `blockSize` tokens is `blockSize * 4` bytes, and block i is hashed with block i-1's
// hash as the XXH3 seed: the work per request is one native call (xxh3_chain).
import { xxh3, xxh3Blocks } from '../core/hash.js'
import { native } from '../core/native.js'
import { BYTES_PER_TOKEN, tokenCount, tokenIdsOf } from './tokenizer.js'

export interface PreparedPrompt {
  promptTokens: number
  /** One key per full block of the prompt: the low 52 bits of its chained hash (see block-index.ts). */
  blockKeys: Float64Array
  /**
   * The prompt's token ids, kept only when asked for (an engine publishing KV events
   * needs them for BlockStored): the prompt's ceil(bytes / 4) tokens.
   */
  tokenIds?: Uint32Array
}

const seeds = new Map<string, bigint>()

/** The hash chain's seed for a model or adapter name and an optional cache_salt. */
export function cacheSeed(model: string, salt?: string): bigint {
  const key = salt === undefined ? model : `${model}\0salt\0${salt}`
  let seed = seeds.get(key)
  if (seed === undefined) {
    seed = xxh3(`prefix-router-sim\0${key}`)
    if (seeds.size > 10_000) seeds.clear() // salts are per tenant; keep this bounded
    seeds.set(key, seed)
  }
  return seed
}

export function hashBlocks(bytes: Uint8Array, blockSize: number, seed: bigint): bigint[] {
  return [...xxh3Blocks(bytes, blockSize * BYTES_PER_TOKEN, seed)]
}

/** The cache's key for a block hash: exact as a double, cheap to compare and index. */
export function blockKey(hash: bigint): number {
  return Number(BigInt.asUintN(52, hash))
}

// One native call per prompt hashes the whole chain and writes the low 52 bits of each
// block's hash as a double: calling into the addon once per block cost as much as
// simulating the request.
export function preparePrompt(bytes: Uint8Array, blockSize: number, seed: bigint, withTokens = false): PreparedPrompt {
  const blockBytes = blockSize * BYTES_PER_TOKEN
  const keys = new Float64Array(Math.floor(bytes.length / blockBytes))
  native.xxh3_chain(bytes, blockBytes, seed, keys)
  const out: PreparedPrompt = { promptTokens: tokenCount(bytes.length), blockKeys: keys }
  if (withTokens) out.tokenIds = tokenIdsOf(bytes)
  return out
}

/** preparePrompt for text under the `bytes` tokenizer: the addon reads the string's UTF-8 itself. */
export function preparePromptText(text: string, blockSize: number, seed: bigint, withTokens = false): PreparedPrompt {
  // With tokens wanted, the UTF-8 is needed here anyway: hash those bytes, the same ones.
  if (withTokens) return preparePrompt(Buffer.from(text, 'utf8'), blockSize, seed, true)
  const blockBytes = blockSize * BYTES_PER_TOKEN
  const length = Buffer.byteLength(text)
  const keys = new Float64Array(Math.floor(length / blockBytes))
  native.xxh3_chain(text, blockBytes, seed, keys)
  return { promptTokens: tokenCount(length), blockKeys: keys }
}
