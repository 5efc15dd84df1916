// OpenAI's o200k_base BPE (gpt-tokenizer), so that block boundaries fall where a real
// tokenizer puts them rather than every 64 bytes, as the router's own blocks do. The
// prompt's token ids become 4 little-endian bytes each, as token-id prompts already are,
// so hashing stays one native call over blockSize × 4 bytes and the count is the ids'.
//
// The encoding (2 MB of ranks, ~0.2 s and ~70 MB to load) is loaded on first use, never
// in `bytes` runs. It is required through createRequire (the package's CommonJS build;
// only this encoding's ranks come with it) because prompts are prepared synchronously, in
// VirtualFleet.prepare and a worker's request handler, where an import() cannot be awaited.
import { createRequire } from 'node:module'
import { preparePrompt } from '../block-hash.js'
import type { Tokenizer } from './types.js'
import { SegmentCache } from './segment-cache.js'

type O200k = typeof import('gpt-tokenizer/encoding/o200k_base')

let cache: SegmentCache | undefined
let decodeIds: O200k['decode'] | undefined

/** The o200k segment cache, loading the encoding on first use. */
export function o200kCache(): SegmentCache {
  if (cache === undefined) {
    const { encode, decode } = createRequire(import.meta.url)('gpt-tokenizer/encoding/o200k_base') as O200k
    decodeIds = decode
    // Special-token strings in a prompt ("<|endoftext|>", the template's "<|im_start|>")
    // are ordinary text, as they are in the rendered template: by default gpt-tokenizer
    // throws on them, and a worker must not fail a request for its content.
    const plain = { disallowedSpecial: new Set<string>() }
    cache = new SegmentCache((text) => encode(text, plain))
  }
  return cache
}

/** The text of o200k ids (for /detokenize); throws on an id outside the vocabulary. */
export function o200kDecode(ids: readonly number[]): string {
  o200kCache()
  return decodeIds!(ids)
}

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
