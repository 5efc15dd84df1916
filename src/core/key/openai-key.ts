// The routing text of an OpenAI request: the prompt as the model will see it, in order,
// independent of JSON formatting and of sampling parameters. Two requests whose text
// begins the same way share a key, whatever else differs in their bodies.
import { RequestError } from '../errors.js'
import { embeddingsText } from './embeddings-key.js'
import { messagesText, promptText, type MessagesText } from './prompt-text.js'
import { responsesText } from './responses-key.js'
import { rerankText, scoreText } from './score-key.js'
import { detokenizeText, tokenizeText } from './tokenize-key.js'

/** The APIs whose JSON bodies the router reads for a routing key. */
export type OpenAIApi = 'chat' | 'completions' | 'embeddings' | 'responses' | 'rerank' | 'score' | 'tokenize' | 'detokenize'

export interface OpenAIRequest {
  model: string | undefined
  /** Routing text, already cut to at least `limit` code points (the router cuts exactly). */
  text: string
  /** `prompt_cache_key` from the body, the OpenAI way to name a cache scope. */
  promptCacheKey: string | undefined
  /**
   * Chat only: the length of `text` (UTF-16 units) up to the end of the first user message.
   * Every later turn of the conversation begins with it, so longest_prefix hashes it to place
   * a request when no match decides: turns of one conversation then agree across replicas.
   */
  anchor: number | undefined
  stream: boolean
}

// The other APIs' text, each from its own module; chat and completions stay below.
const OTHER: Record<Exclude<OpenAIApi, 'chat' | 'completions'>, (b: Record<string, unknown>, cap: number) => MessagesText> = {
  embeddings: embeddingsText,
  responses: responsesText,
  rerank: rerankText,
  score: scoreText,
  tokenize: tokenizeText,
  detokenize: detokenizeText,
}

/**
 * Parses and checks an OpenAI body; `limit` is the prefix length in code points, so text
 * beyond 2×limit UTF-16 units (always ≥ limit code points) is not even concatenated.
 */
export function openAIRequest(api: OpenAIApi, raw: Buffer, limit: number): OpenAIRequest {
  let body: unknown
  try {
    body = JSON.parse(raw.toString('utf8'))
  } catch (err) {
    throw new RequestError('invalid_json', `request body is not valid JSON: ${(err as Error).message}`)
  }
  if (body === null || typeof body !== 'object' || Array.isArray(body)) throw new RequestError('invalid_body', 'request body must be a JSON object')
  const b = body as Record<string, unknown>
  if (b.model !== undefined && typeof b.model !== 'string') throw new RequestError('invalid_model', "'model' must be a string")
  if (b.prompt_cache_key !== undefined && typeof b.prompt_cache_key !== 'string') {
    throw new RequestError('invalid_prompt_cache_key', "'prompt_cache_key' must be a string")
  }
  const cap = limit * 2
  let text = ''
  let anchor: number | undefined
  if (api === 'chat') {
    if (!Array.isArray(b.messages) || b.messages.length === 0) throw new RequestError('missing_messages', "'messages' must be a non-empty array")
    ;({ text, anchor } = messagesText(b.messages, cap))
  } else if (api === 'completions') {
    const p = promptText(b.prompt)
    if (p === undefined) throw new RequestError('missing_prompt', "'prompt' must be a string or a non-empty array")
    text = p
  } else {
    ;({ text, anchor } = OTHER[api](b, cap))
  }
  return {
    model: b.model as string | undefined,
    text: text.length > cap ? text.slice(0, cap) : text,
    promptCacheKey: b.prompt_cache_key as string | undefined,
    anchor,
    stream: b.stream === true,
  }
}
