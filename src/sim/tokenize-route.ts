// POST /tokenize and /detokenize on a live worker, as vLLM's serve/tokenize answers them:
// a chat body ({messages, add_generation_prompt = true, add_special_tokens = false, tools})
// is rendered with the simulator's template, a completion body ({prompt: string,
// add_special_tokens = true}) is its text, and either goes through tokens/builtin-ids.ts, the
// path the engine's prompts take, so the ids are exactly those the engine prefills. The
// simulator's tokenizers have no special tokens: add_special_tokens is checked and adds
// nothing. cache_salt and tenants key the cache, not the tokens, so they change nothing.
import type { ResolvedSim } from './config.js'
import type { ModelRegistry } from './models.js'
import { ApiError, parseChatRequest } from './openai-shapes.js'
import { detokenize, promptTokenIds } from '../tokens/builtin-ids.js'

type Json = Record<string, unknown>

function bad(message: string, param: string | null = null): ApiError {
  return new ApiError(400, message, 'BadRequestError', param)
}

function object(body: unknown): Json {
  if (typeof body !== 'object' || body === null || Array.isArray(body)) throw bad('The request body must be a JSON object.')
  return body as Json
}

function optionalBool(b: Json, key: string): boolean | undefined {
  const v = b[key]
  if (v === undefined || v === null) return undefined
  if (typeof v !== 'boolean') throw bad(`${key} must be a boolean; got ${JSON.stringify(v)}`, key)
  return v
}

function model(b: Json, models: ModelRegistry): string {
  if (b.model !== undefined && b.model !== null && typeof b.model !== 'string') throw bad('model must be a string', 'model')
  return models.resolve(typeof b.model === 'string' ? b.model : undefined)
}

export function tokenizeAnswer(body: unknown, models: ModelRegistry, sim: ResolvedSim): object {
  const b = object(body)
  optionalBool(b, 'add_special_tokens')
  const strs = optionalBool(b, 'return_token_strs') ?? false
  let ids: Uint32Array
  if (b.messages !== undefined) {
    if (optionalBool(b, 'continue_final_message') === true) {
      if (b.add_generation_prompt === true) throw bad('Cannot set both `continue_final_message` and `add_generation_prompt` to True.')
      throw bad('continue_final_message is not supported by the simulator', 'continue_final_message')
    }
    const chat = parseChatRequest(b)
    model(b, models)
    ids = promptTokenIds(chat, sim.tokenizer)
  } else if (b.prompt !== undefined) {
    if (typeof b.prompt !== 'string') throw bad("'prompt' must be a string", 'prompt')
    model(b, models)
    ids = promptTokenIds({ text: b.prompt }, sim.tokenizer)
  } else {
    throw bad('The body needs "messages" (chat) or "prompt" (completion).')
  }
  const tokens = Array.from(ids)
  return {
    count: tokens.length,
    max_model_len: sim.engine.maxModelLen,
    tokens,
    token_strs: strs ? tokens.map((id, i) => tokenString(id, i === tokens.length - 1, sim)) : null,
  }
}

export function detokenizeAnswer(body: unknown, models: ModelRegistry, sim: ResolvedSim): object {
  const b = object(body)
  model(b, models)
  const t = b.tokens
  if (!Array.isArray(t)) throw bad("Field required: 'tokens' (an array of token ids)", 'tokens')
  for (const [i, x] of t.entries()) {
    if (typeof x !== 'number' || !Number.isInteger(x) || x < 0 || x >= 2 ** 32) {
      throw bad(`tokens[${i}] must be a token id (an integer from 0 to ${2 ** 32 - 1}); got ${JSON.stringify(x)}`, 'tokens')
    }
  }
  try {
    return { prompt: detokenize(t as number[], sim.tokenizer) }
  } catch (err) {
    throw bad(`Cannot detokenize: ${(err as Error).message}`, 'tokens')
  }
}

// A token's string as a byte-level tokenizer's convert_ids_to_tokens shows it (GPT-2's
// printable stand-in for each byte), so a 4-byte token that cuts a character in two still
// has a faithful string; o200k's are its decoded text.
function tokenString(id: number, last: boolean, sim: ResolvedSim): string {
  if (sim.tokenizer === 'o200k') return detokenize([id], 'o200k')
  let s = ''
  for (let k = 0; k < 4; k++) {
    const byte = (id >>> (8 * k)) & 0xff
    if (last && k > 0 && id >>> (8 * k) === 0) break // the short last token's padding
    s += BYTE_CHARS[byte]
  }
  return s
}

const BYTE_CHARS: string[] = (() => {
  const out: string[] = new Array(256)
  let n = 0
  for (let b = 0; b < 256; b++) {
    const printable = (b >= 0x21 && b <= 0x7e) || (b >= 0xa1 && b <= 0xac) || (b >= 0xae && b <= 0xff)
    out[b] = String.fromCodePoint(printable ? b : 256 + n++)
  }
  return out
})()
