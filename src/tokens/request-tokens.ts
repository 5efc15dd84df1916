// A request's token ids for the exact view, and the seed of its block chain: the tokenizer
// (remote or local) gets the messages or prompt as the client sent them; the seed names the
// LoRA adapter (when the model is one) and cache_salt, as vLLM's block hashes do. Anything
// this cannot tokenize (other APIs, a list of prompts) is routed on the approximate view.
import { exactSeed } from '../core/exact-seed.js'
import type { OpenAIApi } from '../core/key/openai-key.js'
import type { ExactTokens } from '../core/router.js'
import type { RequestTokenizer, TokenizeInput } from './types.js'

function input(api: OpenAIApi, body: Record<string, unknown>, model: string): TokenizeInput | undefined {
  if (api === 'chat') {
    if (!Array.isArray(body.messages)) return undefined
    return { kind: 'chat', model, messages: body.messages, ...(body.tools !== undefined && { tools: body.tools }) }
  }
  if (api === 'completions') {
    const p = body.prompt
    if (typeof p === 'string') return { kind: 'completion', model, prompt: p }
    if (Array.isArray(p) && p.every((t) => Number.isInteger(t) && t >= 0 && t <= 0xffffffff)) return { kind: 'completion', model, prompt: p as number[] }
  }
  return undefined
}

/**
 * The ids and seed, or undefined (not tokenizable here, or the tokenizer failed or was late).
 * `isAdapter`: whether `model` names a LoRA adapter (its blocks are keyed by its name).
 */
export async function exactTokens(tokenizer: RequestTokenizer, api: OpenAIApi, raw: Buffer, model: string | undefined, isAdapter: boolean, instanceUrl: string | undefined): Promise<ExactTokens | undefined> {
  if (api !== 'chat' && api !== 'completions') return undefined
  let body: unknown
  try {
    body = JSON.parse(raw.toString('utf8'))
  } catch {
    return undefined // the instance answers the bad body; routing it exactly gains nothing
  }
  if (body === null || typeof body !== 'object' || Array.isArray(body)) return undefined
  const b = body as Record<string, unknown>
  const m = model ?? (typeof b.model === 'string' ? b.model : '')
  const inp = input(api, b, m)
  if (inp === undefined) return undefined
  const ids = await tokenizer.tokens(inp, instanceUrl)
  if (ids === undefined) return undefined
  const salt = typeof b.cache_salt === 'string' && b.cache_salt !== '' ? b.cache_salt : undefined
  return { ids, seed: exactSeed(isAdapter ? m : undefined, salt) }
}
