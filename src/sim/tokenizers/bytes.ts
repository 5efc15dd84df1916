// The default tokenizer: 4 bytes of UTF-8 are one token (see ../tokenizer.ts), so a block
// is a byte range of the text and the addon hashes the string in place.
import { preparePromptText } from '../block-hash.js'
import type { Tokenizer } from './types.js'

export const bytesTokenizer: Tokenizer = {
  name: 'bytes',
  prepareText: preparePromptText,
  load() {},
}
