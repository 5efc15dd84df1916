// OpenAI's o200k_base BPE (gpt-tokenizer), so that block boundaries fall where a real
// tokenizer puts them rather than every 64 bytes, as the router's own blocks do. The
// prompt's token ids become 4 little-endian bytes each, as token-id prompts already are,
// so hashing stays one native call over blockSize × 4 bytes and the count is the ids'.
// The encoding and its segment cache are the builtin tokenizer's (../../tokens/o200k.ts),
// loaded on first use.
import { preparePrompt } from '../block-hash.js'
import type { Tokenizer } from './types.js'
import { o200kCache } from '../../tokens/o200k.js'

const LITTLE_ENDIAN = new Uint8Array(new Uint32Array([1]).buffer)[0] === 1

function idBytes(ids: Uint32Array): Uint8Array {
  if (LITTLE_ENDIAN) return new Uint8Array(ids.buffer, ids.byteOffset, ids.byteLength)
  const out = new Uint8Array(ids.length * 4)
  const view = new DataView(out.buffer)
  for (let i = 0; i < ids.length; i++) view.setUint32(i * 4, ids[i]!, true)
  return out
}

export const o200kTokenizer: Tokenizer = {
  name: 'o200k',
  prepareText(text, blockSize, seed, withTokens = false) {
    return preparePrompt(idBytes(o200kCache().encode(text)), blockSize, seed, withTokens)
  },
  load() {
    o200kCache()
  },
}
