// The simulator's chat format, which the builtin tokenizers render as its workers do: the
// messages as its API accepts them, and a ChatML-style template: role markers around each
// message's content, in order, then the generation prompt. The one property routing
// depends on: the prompt of turn k is a byte prefix of the prompt of turn k+1 (the
// generation prompt "<|im_start|>assistant\n" is exactly how the assistant's reply then
// begins), so a conversation's blocks chain.
import { PrefixRouterError } from '../core/errors.js'

export interface ChatMessage {
  role: string
  /** Text, or the rendered text of its parts; null for an assistant message with only tool calls. */
  content: string | null
  name?: string
  /** Already-serialized tool calls (JSON), rendered after the content. */
  toolCalls?: string
}

const START = '<|im_start|>'
const END = '<|im_end|>\n'
export const GENERATION_PROMPT = `${START}assistant\n`

export function renderChat(messages: readonly ChatMessage[], addGenerationPrompt = true): string {
  let out = ''
  for (const m of messages) {
    out += START + m.role
    if (m.name !== undefined) out += ` name=${m.name}`
    out += '\n'
    if (m.content !== null) out += m.content
    if (m.toolCalls !== undefined) out += `<tool_calls>${m.toolCalls}</tool_calls>`
    out += END
  }
  if (addGenerationPrompt) out += GENERATION_PROMPT
  return out
}

/** Why a request's `messages` are not a chat: the simulator answers it as a 400 on `messages`, the builtin tokenizers fall back. */
export class ChatMessagesError extends PrefixRouterError {
  declare readonly code: 'ERR_CHAT_MESSAGES'
  constructor(message: string) {
    super('ERR_CHAT_MESSAGES', message)
    this.name = 'ChatMessagesError'
  }
}

type Json = Record<string, unknown>

function isObject(v: unknown): v is Json {
  return typeof v === 'object' && v !== null && !Array.isArray(v)
}

const ROLES = new Set(['system', 'developer', 'user', 'assistant', 'tool', 'function'])

function messageContent(m: Json, i: number): string | null {
  const c = m.content
  if (c === undefined || c === null) {
    if (m.role === 'assistant') return null
    throw new ChatMessagesError(`messages[${i}].content is required for role '${String(m.role)}'`)
  }
  if (typeof c === 'string') return c
  if (!Array.isArray(c)) throw new ChatMessagesError(`messages[${i}].content must be a string or an array of parts`)
  const parts: string[] = []
  for (const [j, p] of c.entries()) {
    if (!isObject(p) || typeof p.type !== 'string') {
      throw new ChatMessagesError(`messages[${i}].content[${j}] must be an object with a 'type'`)
    }
    if (p.type === 'text') {
      if (typeof p.text !== 'string') throw new ChatMessagesError(`messages[${i}].content[${j}].text must be a string`)
      parts.push(p.text)
    } else {
      // Non-text parts (images, audio) are rendered as their JSON so that they still
      // occupy and key prompt blocks deterministically.
      parts.push(JSON.stringify(p))
    }
  }
  return parts.join('\n')
}

/** A request's `messages` as the template renders them; throws ChatMessagesError on any that are not. */
export function chatMessages(raw: unknown): ChatMessage[] {
  if (raw === undefined) throw new ChatMessagesError("Field required: 'messages'")
  if (!Array.isArray(raw)) throw new ChatMessagesError("'messages' must be an array")
  if (raw.length === 0) throw new ChatMessagesError("'messages' must contain at least one message")
  return raw.map((m: unknown, i) => {
    if (!isObject(m)) throw new ChatMessagesError(`messages[${i}] must be an object`)
    if (typeof m.role !== 'string' || !ROLES.has(m.role)) {
      throw new ChatMessagesError(`messages[${i}].role must be one of ${[...ROLES].join(', ')}; got ${JSON.stringify(m.role)}`)
    }
    const msg: ChatMessage = { role: m.role, content: messageContent(m, i) }
    if (typeof m.name === 'string') msg.name = m.name
    if (m.tool_calls !== undefined && m.tool_calls !== null) msg.toolCalls = JSON.stringify(m.tool_calls)
    return msg
  })
}
