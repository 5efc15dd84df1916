// The token ids of a prompt under the builtin tokenizers, the simulator's own, for its
// /tokenize and for a router that must see a request as its engine does. The engine never
// needs ids (it hashes a prompt's bytes in place, see sim/block-hash.ts); these are ids whose 4 little-endian bytes
// are exactly those bytes, so hashing them gives the engine's block keys:
//   bytes  token i = UTF-8 bytes [4i, 4i + 4) read as a little-endian uint32; the last,
//          short token is padded with zero bytes (it never fills a block, so no block
//          key depends on the padding);
//   o200k  the BPE's ids, as sim/tokenizers/o200k.ts hashes them.
import { renderChat, type ChatMessage } from './chatml.js'
import { o200kCache, o200kDecode } from './o200k.js'

export const BUILTIN_TOKENIZERS = ['bytes', 'o200k'] as const
export type BuiltinName = (typeof BUILTIN_TOKENIZERS)[number]

/** `bytes`: 4 bytes of a prompt's UTF-8 are one token (see sim/tokenizer.ts). */
export const BYTES_PER_TOKEN = 4

export interface PromptSource {
  messages?: readonly ChatMessage[]
  addGenerationPrompt?: boolean
  text?: string | undefined
  tokenIds?: readonly number[] | undefined
}

/**
 * The text a prompt is tokenized from: a chat's rendered template or the completion's
 * text; undefined for token ids, which are the tokens themselves. /tokenize renders through
 * here too, so it answers the tokens the engine prefills.
 */
export function promptText(src: PromptSource): string | undefined {
  if (src.messages !== undefined) return renderChat(src.messages, src.addGenerationPrompt ?? true)
  if (src.tokenIds !== undefined) return undefined
  return src.text ?? ''
}

export function textTokenIds(text: string, tokenizer: BuiltinName): Uint32Array {
  if (tokenizer === 'o200k') return o200kCache().encode(text).slice() // a copy: the cache's arrays are shared
  const utf8 = Buffer.from(text, 'utf8')
  const out = new Uint32Array(Math.ceil(utf8.length / BYTES_PER_TOKEN))
  new Uint8Array(out.buffer).set(utf8) // zero-filled past the end: the short last token's padding
  if (!LITTLE_ENDIAN) for (let i = 0; i < out.length; i++) out[i] = swap32(out[i]!)
  return out
}

/** The ids the engine prefills for `src`: the chat template and text go through promptText, as in sim/request.ts. */
export function promptTokenIds(src: PromptSource, tokenizer: BuiltinName): Uint32Array {
  const text = promptText(src)
  return text === undefined ? Uint32Array.from(src.tokenIds ?? []) : textTokenIds(text, tokenizer)
}

/** The text of `ids`: the inverse of textTokenIds (the last token's zero padding dropped). */
export function detokenize(ids: readonly number[], tokenizer: BuiltinName): string {
  if (tokenizer === 'o200k') return o200kDecode(ids)
  const bytes = Buffer.alloc(ids.length * BYTES_PER_TOKEN)
  for (let i = 0; i < ids.length; i++) bytes.writeUInt32LE(ids[i]!, i * BYTES_PER_TOKEN)
  let end = bytes.length
  while (end > bytes.length - BYTES_PER_TOKEN + 1 && end > 0 && bytes[end - 1] === 0) end--
  return bytes.subarray(0, end).toString('utf8')
}

const LITTLE_ENDIAN = new Uint8Array(new Uint32Array([1]).buffer)[0] === 1

function swap32(x: number): number {
  return (((x & 0xff) << 24) | ((x & 0xff00) << 8) | ((x >>> 8) & 0xff00) | (x >>> 24)) >>> 0
}
