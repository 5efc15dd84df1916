// vLLM's /v1/rerank and /v1/score: every document is scored against the same query, which
// therefore opens every prompt the model sees; the documents vary and are left out.
import { RequestError } from '../errors.js'
import { contentText, promptText, type MessagesText } from './prompt-text.js'

/** A query given as text, a list (its first), or a multimodal {content: [parts]} object. */
function queryText(q: unknown, name: string): string | undefined {
  if (q !== null && typeof q === 'object' && !Array.isArray(q)) return contentText((q as { content?: unknown }).content, name)
  return promptText(q)
}

export function rerankText(b: Record<string, unknown>): MessagesText {
  const text = queryText(b.query, 'query')
  if (text === undefined) throw new RequestError('missing_query', "'query' must be a string")
  return { text, anchor: undefined }
}

export function scoreText(b: Record<string, unknown>): MessagesText {
  const text = queryText(b.text_1, 'text_1')
  if (text === undefined) throw new RequestError('missing_query', "'text_1' must be a string or a non-empty array of strings")
  return { text, anchor: undefined }
}
