// The simulator's tokenizers, behind one small interface: what a prompt's text costs in
// tokens and which blocks it keys. Token-id prompts do not come here: they are one token
// per id under every tokenizer (see ../tokenizer.ts encodeTokenIds).
import type { PreparedPrompt } from '../block-hash.js'
import { bytesTokenizer } from './bytes.js'
import { o200kTokenizer } from './o200k.js'

export const TOKENIZERS = ['bytes', 'o200k'] as const
export type TokenizerName = (typeof TOKENIZERS)[number]
export const DEFAULT_TOKENIZER: TokenizerName = 'bytes'

export interface Tokenizer {
  readonly name: TokenizerName
  /** The token count and block keys of a text prompt, the chain seeded with `seed` (and its token ids if `withTokens`). */
  prepareText(text: string, blockSize: number, seed: bigint, withTokens?: boolean): PreparedPrompt
  /** Loads what the tokenizer needs now rather than on the first prompt (a server's first request). */
  load(): void
}

export function isTokenizerName(v: unknown): v is TokenizerName {
  return typeof v === 'string' && (TOKENIZERS as readonly string[]).includes(v)
}

export function getTokenizer(name: TokenizerName): Tokenizer {
  return name === 'o200k' ? o200kTokenizer : bytesTokenizer
}
