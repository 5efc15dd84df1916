// /v1/responses: `instructions`, then the text of `input`, a string or a list of items of
// which only the messages carry prompt text (function calls, their outputs and reasoning
// items are skipped). Read as the conversation vLLM renders it (instructions as the system
// message, a string input as a user message), so a request keys as the same chat would.
import { RequestError } from '../errors.js'
import { messagesText, type MessagesText } from './prompt-text.js'

interface Turn {
  role: string
  content: unknown
}

export function responsesText(b: Record<string, unknown>, cap: number): MessagesText {
  const turns: Turn[] = []
  if (b.instructions !== undefined && b.instructions !== null) {
    if (typeof b.instructions !== 'string') throw new RequestError('invalid_instructions', "'instructions' must be a string")
    turns.push({ role: 'system', content: b.instructions })
  }
  if (typeof b.input === 'string') turns.push({ role: 'user', content: b.input })
  else if (Array.isArray(b.input)) {
    b.input.forEach((item: unknown, i) => {
      if (item === null || typeof item !== 'object' || Array.isArray(item)) throw new RequestError('invalid_input', `input[${i}] must be an object`)
      const it = item as { type?: unknown; role?: unknown; content?: unknown }
      if ((it.type === undefined || it.type === 'message') && typeof it.role === 'string') turns.push({ role: it.role, content: it.content })
    })
  } else if (b.input !== undefined && b.input !== null) {
    throw new RequestError('invalid_input', "'input' must be a string or an array of input items")
  }
  if (turns.length === 0) throw new RequestError('missing_input', "'input' (a string or a list of messages) or 'instructions' must be given")
  return messagesText(turns, cap, 'input')
}
