// The tokenizer interface and its names, apart from index.ts (which picks one by name) so
// that each tokenizer can name what it implements without importing the file that imports it.
import type { PreparedPrompt } from '../block-hash.js'

import { BUILTIN_TOKENIZERS, type BuiltinName } from '../../tokens/builtin-ids.js'

/** The simulator's tokenizers are the router's builtin ones, so a router tokenizes as its workers do. */
export const TOKENIZERS = BUILTIN_TOKENIZERS
export type TokenizerName = BuiltinName

export interface Tokenizer {
  readonly name: TokenizerName
  /** The token count and block keys of a text prompt, the chain seeded with `seed` (and its token ids if `withTokens`). */
  prepareText(text: string, blockSize: number, seed: bigint, withTokens?: boolean): PreparedPrompt
  /** Loads what the tokenizer needs now rather than on the first prompt (a server's first request). */
  load(): void
}
