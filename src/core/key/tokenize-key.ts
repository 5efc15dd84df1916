// vLLM's /tokenize and /detokenize. They use no KV cache, so any instance serving the model
// would do; they are keyed like the prompts they carry all the same, which keeps one
// prompt's requests on one instance and costs nothing.
import { RequestError } from '../errors.js'
import { messagesText, promptText, type MessagesText } from './prompt-text.js'

export function tokenizeText(b: Record<string, unknown>, cap: number): MessagesText {
  const prompt = promptText(b.prompt)
  if (prompt !== undefined) return { text: prompt, anchor: undefined }
  if (b.prompt === undefined && Array.isArray(b.messages) && b.messages.length > 0) return messagesText(b.messages, cap)
  throw new RequestError('missing_prompt', "'prompt' (a string) or 'messages' (a non-empty array) must be given")
}

export function detokenizeText(b: Record<string, unknown>): MessagesText {
  const tokens = b.tokens
  if (!Array.isArray(tokens) || tokens.length === 0 || !tokens.every((t) => Number.isInteger(t))) {
    throw new RequestError('missing_tokens', "'tokens' must be a non-empty array of token ids")
  }
  return { text: tokens.join(' '), anchor: undefined }
}
