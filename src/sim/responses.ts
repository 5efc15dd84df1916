// POST /v1/responses on a live worker, in vLLM's shape: one completed message of filler text
// (max_output_tokens of it, 16 by default), run through the engine like a completion whose
// prompt is the request's instructions and input. Not streamed.
import type { GenerationRequest, Usage } from './openai-shapes.js'
import { ApiError } from './openai-shapes.js'

/** Output length without max_output_tokens. */
export const DEFAULT_OUTPUT_TOKENS = 16

export function parseResponsesRequest(body: unknown): GenerationRequest {
  if (body === null || typeof body !== 'object' || Array.isArray(body)) throw new ApiError(400, 'The request body must be a JSON object.')
  const b = body as Record<string, unknown>
  if (b.model !== undefined && b.model !== null && typeof b.model !== 'string') throw new ApiError(400, 'model must be a string', 'BadRequestError', 'model')
  if (b.stream === true) throw new ApiError(400, 'The simulator does not stream /v1/responses.', 'BadRequestError', 'stream')
  const max = b.max_output_tokens
  if (max !== undefined && max !== null && !(Number.isInteger(max) && (max as number) > 0)) {
    throw new ApiError(400, 'max_output_tokens must be a positive integer', 'BadRequestError', 'max_output_tokens')
  }
  return {
    kind: 'completion',
    model: typeof b.model === 'string' ? b.model : undefined,
    // The instructions and the input, as one text: its tokens are the prompt's.
    text: JSON.stringify([b.instructions ?? '', b.input ?? '']),
    tokenIds: undefined,
    maxTokens: (max as number | undefined) ?? DEFAULT_OUTPUT_TOKENS,
    stream: false,
    includeUsage: false,
    cacheSalt: undefined,
  }
}

/** The response object (`kvTransferParams` as vLLM's ResponsesResponse carries them, null otherwise). */
export function responsesBody(model: string, text: string, usage: Usage, kvTransferParams: object | null): string {
  const id = crypto.randomUUID().replace(/-/g, '')
  return JSON.stringify({
    id: `resp_${id}`,
    object: 'response',
    created_at: Math.floor(Date.now() / 1000),
    model,
    status: 'completed',
    output: [{ id: `msg_${id}`, type: 'message', role: 'assistant', status: 'completed', content: [{ type: 'output_text', text, annotations: [] }] }],
    usage: {
      input_tokens: usage.promptTokens,
      input_tokens_details: { cached_tokens: usage.cachedTokens },
      output_tokens: usage.completionTokens,
      output_tokens_details: { reasoning_tokens: 0 },
      total_tokens: usage.promptTokens + usage.completionTokens,
    },
    kv_transfer_params: kvTransferParams,
  })
}
