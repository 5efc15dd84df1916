// The pieces of routing text the OpenAI-shaped APIs share: a prompt given as text or token
// ids, message content given as a string or as parts, and a conversation in order. Every API
// that carries a chat-shaped prompt goes through messagesText, so the same conversation keys
// the same whichever route it arrives on (vLLM renders them through the same chat template,
// so they share the same cached prefix).
import { RequestError } from '../errors.js'

// Role markers keep "user: X" and "assistant: X" apart; the separators cannot occur in JSON
// text unescaped only by accident, which is enough for a routing key.
const ROLE_OPEN = '\u241e'
const ROLE_CLOSE = '\u241f'

export function contentText(content: unknown, where: string): string {
  if (content === null || content === undefined) return ''
  if (typeof content === 'string') return content
  if (!Array.isArray(content)) throw new RequestError('invalid_content', `${where}.content must be a string or an array of content parts`)
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

/** A prompt as text: a string, the first of a batch, or token ids; undefined when it is none of them. */
export function promptText(prompt: unknown): string | undefined {
  if (typeof prompt === 'string') return prompt
  if (Array.isArray(prompt) && prompt.length > 0) {
    const first = prompt[0]
    if (typeof first === 'string') return first // a batch routes by its first prompt
    if (typeof first === 'number') return prompt.join(' ') // token ids
    if (Array.isArray(first)) return first.join(' ')
  }
  return undefined
}

export interface MessagesText {
  text: string
  /** Where the first user message ends in `text` (UTF-16 units); see OpenAIRequest.anchor. */
  anchor: number | undefined
}

/** A conversation's routing text, stopping once `cap` UTF-16 units are gathered. */
export function messagesText(messages: readonly unknown[], cap: number, name = 'messages'): MessagesText {
  let text = ''
  let anchor: number | undefined
  for (let i = 0; i < messages.length && text.length < cap; i++) {
    const m = messages[i] as { role?: unknown; content?: unknown } | null
    if (m === null || typeof m !== 'object' || typeof m.role !== 'string') {
      throw new RequestError('invalid_message', `${name}[${i}] must be an object with a string 'role'`)
    }
    text += `${ROLE_OPEN}${m.role}${ROLE_CLOSE}${contentText(m.content, `${name}[${i}]`)}`
    if (anchor === undefined && m.role === 'user') anchor = text.length
  }
  return { text, anchor }
}
