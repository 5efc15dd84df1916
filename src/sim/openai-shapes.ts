// The OpenAI API as vLLM's OpenAI server speaks it: request validation (400 with vLLM's
// error shape) and the response, chunk and usage bodies. Builders return strings: the
// streaming path builds one chunk per token, so chunks are concatenated from a prefix
// computed once per request rather than serialized from objects.
import { chatMessages, ChatMessagesError, type ChatMessage } from '../tokens/chatml.js'

/** An error answered as {"error":{"message","type","param","code"}}; code is the HTTP status, as in vLLM. */
export class ApiError extends Error {
  constructor(
    readonly status: number,
    message: string,
    readonly type = status === 404 ? 'NotFoundError' : status >= 500 ? 'InternalServerError' : 'BadRequestError',
    readonly param: string | null = null,
  ) {
    super(message)
  }
}

export function errorBody(status: number, message: string, type: string, param: string | null = null): string {
  return JSON.stringify({ error: { message, type, param, code: status } })
}

export type ApiKind = 'chat' | 'completion'

export interface GenerationRequest {
  kind: ApiKind
  model: string | undefined
  /** Rendered chat prompt, or completion prompt text. */
  text: string | undefined
  /** Completion prompt given as token ids. */
  tokenIds: number[] | undefined
  maxTokens: number | undefined
  stream: boolean
  includeUsage: boolean
  cacheSalt: string | undefined
}

type Json = Record<string, unknown>

function isObject(v: unknown): v is Json {
  return typeof v === 'object' && v !== null && !Array.isArray(v)
}

function bad(message: string, param: string | null = null): ApiError {
  return new ApiError(400, message, 'BadRequestError', param)
}

function optionalPositiveInt(body: Json, key: string): number | undefined {
  const v = body[key]
  if (v === undefined || v === null) return undefined
  if (typeof v !== 'number' || !Number.isInteger(v)) throw bad(`${key} must be an integer; got ${JSON.stringify(v)}`, key)
  if (v < 1) throw bad(`${key} must be at least 1, got ${v}.`, key)
  return v
}

function common(body: Json, kind: ApiKind): Omit<GenerationRequest, 'text' | 'tokenIds'> {
  const model = body.model
  if (model !== undefined && model !== null && typeof model !== 'string') throw bad('model must be a string', 'model')
  const stream = body.stream ?? false
  if (typeof stream !== 'boolean') throw bad('stream must be a boolean', 'stream')
  const so = body.stream_options
  let includeUsage = false
  if (so !== undefined && so !== null) {
    if (!stream) throw bad('Stream options can only be defined when `stream=True`.', 'stream_options')
    if (!isObject(so)) throw bad('stream_options must be an object', 'stream_options')
    if (so.include_usage !== undefined && so.include_usage !== null && typeof so.include_usage !== 'boolean') {
      throw bad('stream_options.include_usage must be a boolean', 'stream_options')
    }
    includeUsage = so.include_usage === true
  }
  const n = body.n
  if (n !== undefined && n !== null && n !== 1) throw bad('the simulator supports n=1 only', 'n')
  const salt = body.cache_salt
  if (salt !== undefined && salt !== null && (typeof salt !== 'string' || salt.length === 0)) {
    throw bad("Parameter 'cache_salt' must be a non-empty string if provided.", 'cache_salt')
  }
  let maxTokens = optionalPositiveInt(body, 'max_tokens')
  if (kind === 'chat') maxTokens = optionalPositiveInt(body, 'max_completion_tokens') ?? maxTokens
  return {
    kind,
    model: typeof model === 'string' ? model : undefined,
    maxTokens,
    stream,
    includeUsage,
    cacheSalt: typeof salt === 'string' ? salt : undefined,
  }
}

export function parseChatRequest(body: unknown): GenerationRequest & { messages: ChatMessage[]; addGenerationPrompt: boolean } {
  if (!isObject(body)) throw bad('The request body must be a JSON object.')
  let messages: ChatMessage[]
  try {
    messages = chatMessages(body.messages)
  } catch (err) {
    throw err instanceof ChatMessagesError ? bad(err.message, 'messages') : err
  }
  const agp = body.add_generation_prompt ?? true
  if (typeof agp !== 'boolean') throw bad('add_generation_prompt must be a boolean', 'add_generation_prompt')
  return { ...common(body, 'chat'), text: undefined, tokenIds: undefined, messages, addGenerationPrompt: agp }
}

export function parseCompletionRequest(body: unknown): GenerationRequest {
  if (!isObject(body)) throw bad('The request body must be a JSON object.')
  let p = body.prompt
  if (p === undefined || p === null) throw bad("Field required: 'prompt'", 'prompt')
  // A batch of one is the same request; larger batches would need n choices per request.
  if (Array.isArray(p) && p.length === 1 && (typeof p[0] === 'string' || Array.isArray(p[0]))) p = p[0]
  if (typeof p === 'string') {
    if (p.length === 0) throw bad('Prompt cannot be empty', 'prompt')
    return { ...common(body, 'completion'), text: p, tokenIds: undefined }
  }
  if (Array.isArray(p) && p.length > 0 && p.every((x) => typeof x === 'number' && Number.isInteger(x) && x >= 0 && x < 2 ** 32)) {
    return { ...common(body, 'completion'), text: undefined, tokenIds: p as number[] }
  }
  if (Array.isArray(p) && p.length > 1) throw bad('the simulator accepts one prompt per request', 'prompt')
  throw bad("'prompt' must be a non-empty string or an array of token ids", 'prompt')
}

/** vLLM's /invocations: a chat body if it has messages, a completion body if it has a prompt. */
export function parseInvocation(body: unknown): ReturnType<typeof parseChatRequest> | GenerationRequest {
  if (isObject(body) && body.messages !== undefined) return parseChatRequest(body)
  if (isObject(body) && body.prompt !== undefined) return parseCompletionRequest(body)
  throw bad('Cannot determine the request type: the body needs "messages" (chat) or "prompt" (completion).')
}

export interface Usage {
  promptTokens: number
  completionTokens: number
  cachedTokens: number
}

export function usageJson(u: Usage): string {
  return (
    `{"prompt_tokens":${u.promptTokens},"total_tokens":${u.promptTokens + u.completionTokens},` +
    `"completion_tokens":${u.completionTokens},"prompt_tokens_details":{"cached_tokens":${u.cachedTokens}}}`
  )
}

export function newId(kind: ApiKind): string {
  return `${kind === 'chat' ? 'chatcmpl' : 'cmpl'}-${crypto.randomUUID().replace(/-/g, '')}`
}

export interface ResponseMeta {
  kind: ApiKind
  id: string
  created: number
  model: string
}

/** The whole answer; `kvTransferParams` is a prefill leg's (vLLM's top-level field, null otherwise). */
export function completeBody(m: ResponseMeta, text: string, finishReason: string, usage: Usage, kvTransferParams: object | null = null): string {
  const head = `{"id":${JSON.stringify(m.id)},"object":${m.kind === 'chat' ? '"chat.completion"' : '"text_completion"'},"created":${m.created},"model":${JSON.stringify(m.model)},"choices":[`
  const choice =
    m.kind === 'chat'
      ? `{"index":0,"message":{"role":"assistant","content":${JSON.stringify(text)},"refusal":null,"annotations":null,"audio":null,"function_call":null,"tool_calls":[],"reasoning_content":null},"logprobs":null,"finish_reason":"${finishReason}","stop_reason":null}`
      : `{"index":0,"text":${JSON.stringify(text)},"logprobs":null,"finish_reason":"${finishReason}","stop_reason":null,"prompt_logprobs":null}`
  const tail = m.kind === 'chat' ? ',"service_tier":null,"system_fingerprint":null' : ',"system_fingerprint":null'
  return `${head}${choice}]${tail},"usage":${usageJson(usage)},"prompt_logprobs":null,"kv_transfer_params":${JSON.stringify(kvTransferParams)}}`
}

/** Builds SSE events for one streamed response. Token text must need no JSON escaping (filler does not). */
export class ChunkFormat {
  private readonly head: string

  constructor(private readonly m: ResponseMeta) {
    this.head = `data: {"id":${JSON.stringify(m.id)},"object":${m.kind === 'chat' ? '"chat.completion.chunk"' : '"text_completion"'},"created":${m.created},"model":${JSON.stringify(m.model)},"choices":`
  }

  /** The chat stream's opening chunk (role, empty content); completions have none. */
  first(): string {
    return this.m.kind === 'chat'
      ? `${this.head}[{"index":0,"delta":{"role":"assistant","content":""},"logprobs":null,"finish_reason":null}]}\n\n`
      : ''
  }

  token(text: string, finishReason: string | null): string {
    const fr = finishReason === null ? 'null' : `"${finishReason}"`
    const stop = finishReason === null ? '' : ',"stop_reason":null'
    return this.m.kind === 'chat'
      ? `${this.head}[{"index":0,"delta":{"content":"${text}"},"logprobs":null,"finish_reason":${fr}${stop}}]}\n\n`
      : `${this.head}[{"index":0,"text":"${text}","logprobs":null,"finish_reason":${fr}${stop}}]}\n\n`
  }

  usage(u: Usage): string {
    return `${this.head}[],"usage":${usageJson(u)}}\n\n`
  }

  done(): string {
    return 'data: [DONE]\n\n'
  }

  /** An error event, as vLLM streams a generation error (then [DONE]). */
  error(status: number, message: string, type: string): string {
    return `data: ${errorBody(status, message, type)}\n\n`
  }
}
