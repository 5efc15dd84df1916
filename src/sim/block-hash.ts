// Chained block hashes, as vLLM's prefix cache keys blocks: block i's key depends on all
// tokens in blocks 0..i, on the model (or LoRA adapter) and on cache_salt. We hash the
// prompt's bytes in place: a block of `blockSize` tokens is `blockSize * 4` bytes (see
// tokenizer.ts), and block i is hashed with block i-1's hash as the XXH3 seed, so the
// work per request is one native call per full block and no token strings are built.
import { xxh3 } from '../hash.js'
import { BYTES_PER_TOKEN, tokenCount } from './tokenizer.js'

export interface PreparedPrompt {
  promptTokens: number
  /** One key per full block of the prompt: the low 52 bits of its chained hash (see block-index.ts). */
  blockKeys: Float64Array
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
  const blockBytes = blockSize * BYTES_PER_TOKEN
  const full = Math.floor(bytes.length / blockBytes)
  const out = new Array<bigint>(full)
  let h = seed
  for (let i = 0, off = 0; i < full; i++, off += blockBytes) {
    h = xxh3(bytes.subarray(off, off + blockBytes), h)
    out[i] = h
  }
  return out
}

/** The cache's key for a block hash: exact as a double, cheap to compare and index. */
export function blockKey(hash: bigint): number {
  return Number(BigInt.asUintN(52, hash))
}

export function preparePrompt(bytes: Uint8Array, blockSize: number, seed: bigint): PreparedPrompt {
  const blockBytes = blockSize * BYTES_PER_TOKEN
  const full = Math.floor(bytes.length / blockBytes)
  const keys = new Float64Array(full)
  let h = seed
  for (let i = 0, off = 0; i < full; i++, off += blockBytes) {
    h = xxh3(new Uint8Array(bytes.buffer, bytes.byteOffset + off, blockBytes), h)
    keys[i] = Number(BigInt.asUintN(52, h))
  }
  return { promptTokens: tokenCount(bytes.length), blockKeys: keys }
}

// Text prompts are encoded into one reused buffer whose per-block views are made once:
// creating a view per block cost as much as hashing it.
let scratch = new Uint8Array(0)
let views: Uint8Array[] = []
let viewBytes = 0
let viewsOf = scratch

/** preparePrompt for text, without allocating the bytes or a view per block. */
export function preparePromptText(text: string, blockSize: number, seed: bigint): PreparedPrompt {
  const blockBytes = blockSize * BYTES_PER_TOKEN
  // UTF-8 is at most 3 bytes per UTF-16 unit.
  if (scratch.length < text.length * 3) scratch = new Uint8Array(Math.max(text.length * 3, 2 * scratch.length))
  const length = encoder.encodeInto(text, scratch).written
  if (viewBytes !== blockBytes || viewsOf !== scratch) {
    viewBytes = blockBytes
    viewsOf = scratch
    views = []
    for (let off = 0; off + blockBytes <= scratch.length; off += blockBytes) views.push(scratch.subarray(off, off + blockBytes))
  }
  const full = Math.floor(length / blockBytes)
  const keys = new Float64Array(full)
  let h = seed
  for (let i = 0; i < full; i++) {
    h = xxh3(views[i]!, h)
    keys[i] = Number(BigInt.asUintN(52, h))
  }
  return { promptTokens: tokenCount(length), blockKeys: keys }
}

const encoder = new TextEncoder()
