// OpenAI's o200k_base BPE (gpt-tokenizer) behind a segment cache: the builtin `o200k`
// tokenizer, which the router's exact view and the simulator's workers both encode with, so
// that a router against simulated workers sees the ids they prefill.
//
// The encoding (2 MB of ranks, ~0.2 s and ~70 MB to load; gpt-tokenizer is an optional
// package) is loaded on first use, never in `bytes` runs. It is required through createRequire (the package's CommonJS build;
// only this encoding's ranks come with it) because prompts are prepared synchronously, in
// VirtualFleet.prepare and a worker's request handler, where an import() cannot be awaited.
import { createRequire } from 'node:module'
import { requireFeature } from '../core/optional-packages.js'
import { SegmentCache } from './segment-cache.js'

type O200k = typeof import('gpt-tokenizer/encoding/o200k_base')

let cache: SegmentCache | undefined
let decodeIds: O200k['decode'] | undefined

/** The o200k segment cache, loading the encoding on first use. */
export function o200kCache(): SegmentCache {
  if (cache === undefined) {
    requireFeature('o200k')
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
