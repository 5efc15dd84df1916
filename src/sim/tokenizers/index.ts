// The simulator's tokenizers, behind one small interface: what a prompt's text costs in
// tokens and which blocks it keys. Token-id prompts do not come here: they are one token
// per id under every tokenizer (see ../tokenizer.ts encodeTokenIds).
import { bytesTokenizer } from './bytes.js'
import { o200kTokenizer } from './o200k.js'
import { TOKENIZERS, type Tokenizer, type TokenizerName } from './types.js'

export { TOKENIZERS, type Tokenizer, type TokenizerName } from './types.js'
export const DEFAULT_TOKENIZER: TokenizerName = 'bytes'

export function isTokenizerName(v: unknown): v is TokenizerName {
  return typeof v === 'string' && (TOKENIZERS as readonly string[]).includes(v)
}

export function getTokenizer(name: TokenizerName): Tokenizer {
  return name === 'o200k' ? o200kTokenizer : bytesTokenizer
}
