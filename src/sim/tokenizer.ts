// The simulator's default tokenizer, `bytes` (tokenizers/ holds it and `o200k`, a real
// BPE). Real tokenizers average about 4 characters of English per token; we make that
// exact and byte-based so that a token count costs O(1) (a byte length) and a block of
// tokens is a fixed byte range that can be hashed in place:
//
//   token i of a prompt = bytes [4i, 4i + 4) of its UTF-8 encoding (the last one may be short)
//
// Token-id prompts (completions with `prompt: number[]`) are encoded as 4 little-endian
// bytes per id, so they map one id to one token exactly.

import { BYTES_PER_TOKEN } from '../tokens/builtin-ids.js'

export { BYTES_PER_TOKEN }

/** Tokens in a prompt of `byteLength` UTF-8 bytes. */
export function tokenCount(byteLength: number): number {
  return Math.ceil(byteLength / BYTES_PER_TOKEN)
}

export function encodeTokenIds(ids: readonly number[]): Uint8Array {
  const out = new Uint8Array(ids.length * BYTES_PER_TOKEN)
  const view = new DataView(out.buffer)
  for (let i = 0; i < ids.length; i++) view.setUint32(i * BYTES_PER_TOKEN, ids[i]!, true)
  return out
}

/**
 * The token ids of a prompt's bytes: token i is bytes [4i, 4i + 4) as a little-endian
 * uint32 (the last one zero-padded), so writing the ids back as 4 little-endian bytes each
 * gives the very bytes the block keys were hashed over. Under `bytes` that is the UTF-8;
 * under o200k and for token-id prompts the bytes already are the ids.
 */
export function tokenIdsOf(bytes: Uint8Array): Uint32Array {
  const n = tokenCount(bytes.length)
  const out = new Uint32Array(n)
  const whole = Math.floor(bytes.length / BYTES_PER_TOKEN)
  const view = new DataView(bytes.buffer, bytes.byteOffset, bytes.byteLength)
  for (let i = 0; i < whole; i++) out[i] = view.getUint32(i * BYTES_PER_TOKEN, true)
  if (whole < n) {
    let v = 0
    for (let j = bytes.length - 1; j >= whole * BYTES_PER_TOKEN; j--) v = v * 256 + bytes[j]!
    out[whole] = v
  }
  return out
}

// Generated text is a fixed filler whose every token is 4 ASCII characters needing no
// JSON escaping, so output text re-tokenizes to the same count (under `bytes`; under any
// tokenizer, completion_tokens is the engine's count of tokens generated, not a
// re-tokenization) and SSE chunks can be built by concatenation. Its length is a multiple
// of 4 so the cycle stays aligned.
const FILLER =
  'Lorem ipsum dolor sit amet, consectetur adipiscing elit, sed do eiusmod tempor ' +
  'incididunt ut labore et dolore magna aliqua. Ut enim ad minim veniam, quis nostrud exercitation. '
const FILLER_TOKENS = FILLER.length / BYTES_PER_TOKEN
if (!Number.isInteger(FILLER_TOKENS)) throw new Error('filler length must be a multiple of 4')

/** The text of output tokens [start, start + count). Deterministic. */
export function fillerText(start: number, count: number): string {
  let out = ''
  let i = start % FILLER_TOKENS
  for (let k = 0; k < count; k++) {
    out += FILLER.slice(i * BYTES_PER_TOKEN, i * BYTES_PER_TOKEN + BYTES_PER_TOKEN)
    i = i + 1 === FILLER_TOKENS ? 0 : i + 1
  }
  return out
}
