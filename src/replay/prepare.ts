// One request, made ready once and shared by every strategy's lane: the routing text as
// the proxy extracts it, the tenant id as the proxy reads it, and the prompt as the
// simulator keys it (token count and block hashes). Hashing the prompt is the main cost of
// a replay (docs/simulator.md: ~0.15 µs per 64-byte block through N-API), so it is done
// once per request, not once per strategy.
import { xxh3 } from '../core/hash.js'
import { routingKey } from '../core/key/index.js'
import { keyHash } from '../core/key/key-hash.js'
import { cacheSeed, preparePrompt, type PreparedPrompt } from '../sim/block-hash.js'
import { renderChat } from '../tokens/chatml.js'
import { parseChatRequest, parseCompletionRequest } from '../sim/openai-shapes.js'
import { encodeTokenIds } from '../sim/tokenizer.js'
import { getTokenizer, type TokenizerName } from '../sim/tokenizers/index.js'
import type { OpenAIApi } from '../core/key/openai-key.js'
import type { TimedRequest } from './types.js'

export interface PreparedRequest {
  /** Position in the stream, from 0. */
  index: number
  at: number
  api: OpenAIApi
  body: Readonly<Record<string, unknown>>
  /**
   * Routing text as serve extracts it (routingKey in src/core/key/), extracted with the largest prefix length
   * (65,536 code points) so one extraction serves any --prefix-length: the router cuts it
   * to its own prefixLength, exactly as from the proxy's shorter extraction.
   */
  text: string
  /** Tenant id as the proxy reads it: the header, else the body's prompt_cache_key. */
  tenant: string | undefined
  /** Where the chat's first user message ends in `text` (see openAIRequest). */
  anchor: number | undefined
  /** The simulator's view of the prompt (with its token ids when prepared `withTokens`). */
  prompt: PreparedPrompt
  /** The body's cache_salt: event-fed routers seed their block chain with it, as the engine does. */
  cacheSalt: string | undefined
  /** max_tokens (or max_completion_tokens); undefined: the profile's default output. */
  maxTokens: number | undefined
  /** The routing key prefix_aware hashes (see trackingKey); NaN unless key tracking is on. */
  key: number
}

const ROUTING_TEXT_LIMIT = 65536

export interface PrepareOptions {
  /** Model name the simulated fleet serves: every request is served as it (see the README, "Replay"). */
  model: string
  blockSize: number
  /** The lanes' fleets' tokenizer (their ResolvedSim's): prompts must key the blocks their engines would. */
  tokenizer: TokenizerName
  /** Compute `key` with this prefix length (code points), for scale-event tracking. */
  trackKeys?: number
  /** Keep the prompt's token ids (PreparedPrompt.tokenIds), for lanes fed by KV events. */
  withTokens?: boolean
}

export function prepareRequest(req: TimedRequest, index: number, o: PrepareOptions): PreparedRequest {
  const raw = Buffer.from(JSON.stringify(req.body))
  const { text, tenant, anchor } = routingKey(raw, { api: req.api, prefixLength: ROUTING_TEXT_LIMIT, tenant: req.tenant })
  // What a live worker does with the body (src/sim/http-worker.ts → request.ts): vLLM's
  // validation, the chat template, the cache seed of the model and cache_salt.
  const seed = cacheSeed(o.model, undefined)
  const tokenizer = getTokenizer(o.tokenizer)
  const tokens = o.withTokens === true
  let prompt: PreparedPrompt
  let maxTokens: number | undefined
  let cacheSalt: string | undefined
  if (req.api === 'chat') {
    const chat = parseChatRequest(req.body)
    maxTokens = chat.maxTokens
    cacheSalt = chat.cacheSalt
    const s = chat.cacheSalt === undefined ? seed : cacheSeed(o.model, chat.cacheSalt)
    // Same keys as VirtualFleet.prepare: the same rendered text through the same tokenizer.
    prompt = tokenizer.prepareText(renderChat(chat.messages, chat.addGenerationPrompt), o.blockSize, s, tokens)
  } else {
    const c = parseCompletionRequest(req.body)
    maxTokens = c.maxTokens
    cacheSalt = c.cacheSalt
    const s = c.cacheSalt === undefined ? seed : cacheSeed(o.model, c.cacheSalt)
    prompt =
      c.tokenIds !== undefined
        ? preparePrompt(encodeTokenIds(c.tokenIds), o.blockSize, s, tokens)
        : tokenizer.prepareText(c.text ?? '', o.blockSize, s, tokens)
  }
  return {
    index,
    at: req.at,
    api: req.api,
    body: req.body,
    text,
    tenant,
    anchor,
    prompt,
    cacheSalt,
    maxTokens,
    key: o.trackKeys === undefined ? NaN : trackingKey(text, tenant, o.trackKeys),
  }
}

/** The key prefix_aware routes by (keyHash in src/core/key/key-hash.ts), kept to 52 bits so it is exact as a number. */
export function trackingKey(text: string, tenant: string | undefined, prefixLength: number): number {
  return Number(BigInt.asUintN(52, keyHash(text, tenant, prefixLength)))
}
