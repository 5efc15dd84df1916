// POST /v1/responses on a live worker, in vLLM's shape: one completed message of filler text
// (max_output_tokens of it, 16 by default). Not streamed and not run through the engine:
// enough for a client to get a well-formed answer through the router.
import type { ModelRegistry } from './models.js'
import { ApiError } from './openai-shapes.js'
import { fillerText, tokenCount } from './tokenizer.js'

export function responsesAnswer(body: unknown, models: ModelRegistry): object {
  if (body === null || typeof body !== 'object' || Array.isArray(body)) throw new ApiError(400, 'The request body must be a JSON object.')
  const b = body as Record<string, unknown>
  const model = models.resolve(typeof b.model === 'string' ? b.model : undefined)
  if (b.stream === true) throw new ApiError(400, 'The simulator does not stream /v1/responses.', 'BadRequestError', 'stream')
  const max = b.max_output_tokens
  if (max !== undefined && max !== null && !(Number.isInteger(max) && (max as number) > 0)) {
    throw new ApiError(400, 'max_output_tokens must be a positive integer', 'BadRequestError', 'max_output_tokens')
  }
  const outputTokens = (max as number | undefined) ?? 16
  const inputTokens = tokenCount(Buffer.byteLength(JSON.stringify([b.instructions ?? '', b.input ?? ''])))
  const id = crypto.randomUUID().replace(/-/g, '')
  return {
    id: `resp_${id}`,
    object: 'response',
    created_at: Math.floor(Date.now() / 1000),
    model,
    status: 'completed',
    output: [{ id: `msg_${id}`, type: 'message', role: 'assistant', status: 'completed', content: [{ type: 'output_text', text: fillerText(0, outputTokens), annotations: [] }] }],
    usage: { input_tokens: inputTokens, input_tokens_details: { cached_tokens: 0 }, output_tokens: outputTokens, output_tokens_details: { reasoning_tokens: 0 }, total_tokens: inputTokens + outputTokens },
  }
}
