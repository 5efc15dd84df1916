// Traces in the hash-id format of production trace releases (Mooncake's): one JSON object a
// line, no text, only its shape:
//   "timestamp"      arrival, milliseconds (any origin; ties are common, as real traces are
//                    cut to the millisecond)
//   "input_length"   prompt tokens, ≥ 1
//   "output_length"  generated tokens, ≥ 1 (sent as max_tokens)
//   "hash_ids"       one id per block of `blockTokens` prompt tokens, the last block possibly
//                    partial: equal ids mean equal content, and an id stands for its block and
//                    everything before it, so two prompts share a prefix exactly as far as
//                    their ids agree
// Other keys are ignored. Each request is replayed as a /v1/completions prompt built from
// the ids' block texts (src/replay/block-text.ts), exactly `input_length` tokens long under
// the tokenizer the replay simulates with: the texts are made for it.
import { BlockTexts } from './block-text.js'
import { parseObjectLine, TraceError } from './trace-error.js'
import type { TimedRequest } from './types.js'

export interface HashIdRecord {
  timestamp: number
  inputLength: number
  outputLength: number
  hashIds: number[]
}

// A prompt is built whole as a string before the engine can turn it away for its length; past
// this it would no longer be a sane string to build (64 MB), whatever the model's context.
const MAX_INPUT_TOKENS = 2 ** 24

/** Parses and checks one line (1-based `line` for messages); null for a blank line. */
export function parseHashIdLine(text: string, file: string, line: number, blockTokens: number): HashIdRecord | null {
  const obj = parseObjectLine(text, file, line, 'with "timestamp", "input_length", "output_length" and "hash_ids"')
  if (obj === null) return null
  const fail = (m: string): never => {
    throw new TraceError(file, line, m)
  }
  const { timestamp, input_length: input, output_length: output, hash_ids: ids } = obj
  if (typeof timestamp !== 'number') return fail(`"timestamp" must be a number of milliseconds; got ${JSON.stringify(timestamp)}`)
  const count = (key: string, v: unknown): number => {
    if (typeof v !== 'number' || !Number.isSafeInteger(v) || v < 1) return fail(`"${key}" must be a whole number of tokens, at least 1; got ${JSON.stringify(v)}`)
    return v
  }
  const inputLength = count('input_length', input)
  const outputLength = count('output_length', output)
  if (inputLength > MAX_INPUT_TOKENS) return fail(`"input_length" ${inputLength} is over the ${MAX_INPUT_TOKENS} tokens a replay can build a prompt of`)
  if (!Array.isArray(ids)) return fail(`"hash_ids" must be an array of block ids; got ${JSON.stringify(ids)}`)
  for (let i = 0; i < ids.length; i++) {
    const id: unknown = ids[i]
    if (typeof id !== 'number' || !Number.isSafeInteger(id) || id < 0) {
      return fail(`"hash_ids"[${i}] must be a non-negative integer (at most 2^53 − 1); got ${JSON.stringify(id)}`)
    }
  }
  const blocks = Math.ceil(inputLength / blockTokens)
  if (ids.length !== blocks) {
    return fail(
      `"hash_ids" has ${ids.length} id(s) but input_length ${inputLength} in blocks of ${blockTokens} tokens needs ${blocks} ` +
        '(is --trace-block-tokens the block size the trace was made with?)',
    )
  }
  return { timestamp, inputLength, outputLength, hashIds: ids as number[] }
}

/** The request a record is replayed as, its prompt made from `texts`. */
export function hashIdRequest(r: HashIdRecord, texts: BlockTexts): Omit<TimedRequest, 'at'> {
  return { api: 'completions', body: { prompt: texts.prompt(r.hashIds, r.inputLength), max_tokens: r.outputLength } }
}
