// /v1/embeddings: the text to embed, read as /v1/completions reads its prompt (a string, the
// first of a batch, or token ids); vLLM's chat-shaped embedding requests key as a chat does.
import { RequestError } from '../errors.js'
import { messagesText, promptText, type MessagesText } from './prompt-text.js'

export function embeddingsText(b: Record<string, unknown>, cap: number): MessagesText {
  const input = promptText(b.input)
  if (input !== undefined) return { text: input, anchor: undefined }
  if (b.input === undefined && Array.isArray(b.messages) && b.messages.length > 0) return messagesText(b.messages, cap)
  throw new RequestError('missing_input', "'input' must be a string, a non-empty array of strings, or token ids")
}
