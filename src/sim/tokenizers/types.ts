// The tokenizer interface and its names, apart from index.ts (which picks one by name) so
// that each tokenizer can name what it implements without importing the file that imports it.
import type { PreparedPrompt } from '../block-hash.js'

export const TOKENIZERS = ['bytes', 'o200k'] as const
export type TokenizerName = (typeof TOKENIZERS)[number]

export interface Tokenizer {
  readonly name: TokenizerName
  /** The token count and block keys of a text prompt, the chain seeded with `seed` (and its token ids if `withTokens`). */
  prepareText(text: string, blockSize: number, seed: bigint, withTokens?: boolean): PreparedPrompt
  /** Loads what the tokenizer needs now rather than on the first prompt (a server's first request). */
  load(): void
}
