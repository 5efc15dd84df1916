// The routing text of an OpenAI request: the prompt as the model will see it, in order,
// independent of JSON formatting and of sampling parameters. Two requests whose text
// begins the same way share a key, whatever else differs in their bodies.
import { badRequest } from '../proxy/errors.js'

export type OpenAIApi = 'chat' | 'completions'

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

// Role markers keep "user: X" and "assistant: X" apart; the separators cannot occur in JSON
// text unescaped only by accident, which is enough for a routing key.
const ROLE_OPEN = '\u241e'
const ROLE_CLOSE = '\u241f'

function contentText(content: unknown, where: string): string {
  if (content === null || content === undefined) return ''
  if (typeof content === 'string') return content
  if (!Array.isArray(content)) throw badRequest('invalid_content', `${where}.content must be a string or an array of content parts`)
  let out = ''
  for (const part of content) {
    if (part === null || typeof part !== 'object') continue
    const p = part as { type?: unknown; text?: unknown; image_url?: { url?: unknown } | string }
    if (typeof p.text === 'string') out += p.text
    else if (p.type === 'image_url') {
      // The image is part of the prompt the cache sees; its URL (or data URL) stands for it.
      const url = typeof p.image_url === 'string' ? p.image_url : p.image_url?.url
      out += `[image:${typeof url === 'string' ? url : ''}]`
    }
  }
  return out
}

function promptText(prompt: unknown): string | undefined {
  if (typeof prompt === 'string') return prompt
  if (Array.isArray(prompt) && prompt.length > 0) {
    const first = prompt[0]
    if (typeof first === 'string') return first // a batch routes by its first prompt
    if (typeof first === 'number') return prompt.join(' ') // token ids
    if (Array.isArray(first)) return first.join(' ')
  }
  return undefined
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
    throw badRequest('invalid_json', `request body is not valid JSON: ${(err as Error).message}`)
  }
  if (body === null || typeof body !== 'object' || Array.isArray(body)) throw badRequest('invalid_body', 'request body must be a JSON object')
  const b = body as Record<string, unknown>
  if (b.model !== undefined && typeof b.model !== 'string') throw badRequest('invalid_model', "'model' must be a string")
  if (b.prompt_cache_key !== undefined && typeof b.prompt_cache_key !== 'string') {
    throw badRequest('invalid_prompt_cache_key', "'prompt_cache_key' must be a string")
  }
  const cap = limit * 2
  let text = ''
  let anchor: number | undefined
  if (api === 'chat') {
    if (!Array.isArray(b.messages) || b.messages.length === 0) throw badRequest('missing_messages', "'messages' must be a non-empty array")
    for (let i = 0; i < b.messages.length && text.length < cap; i++) {
      const m = b.messages[i] as { role?: unknown; content?: unknown } | null
      if (m === null || typeof m !== 'object' || typeof m.role !== 'string') {
        throw badRequest('invalid_message', `messages[${i}] must be an object with a string 'role'`)
      }
      text += `${ROLE_OPEN}${m.role}${ROLE_CLOSE}${contentText(m.content, `messages[${i}]`)}`
      if (anchor === undefined && m.role === 'user') anchor = text.length
    }
  } else {
    const p = promptText(b.prompt)
    if (p === undefined) throw badRequest('missing_prompt', "'prompt' must be a string or a non-empty array")
    text = p
  }
  return {
    model: b.model as string | undefined,
    text: text.length > cap ? text.slice(0, cap) : text,
    promptCacheKey: b.prompt_cache_key as string | undefined,
    anchor,
    stream: b.stream === true,
  }
}
