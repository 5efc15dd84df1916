// The routing key of one request, exactly as `serve` computes it, for gateways that embed the
// Router and for `route` and replay: one extraction, so the three cannot drift apart. serve
// reads bodies in pieces (an invoke body is streamed on after its prefix, a large OpenAI body
// is parsed in a worker), so it calls the two halves, invokeKey and requestKey, itself.
import { InvalidArgTypeError, OutOfRangeError } from '../errors.js'
import { checkInt, LIMITS } from '../options.js'
import { strategyInfo } from '../strategies.js'
import { openAIRequest, type OpenAIApi, type OpenAIRequest } from './openai-key.js'
import { tenantOf } from './tenant.js'

export { TENANT_HEADER } from './tenant.js'
export type { OpenAIApi, OpenAIRequest } from './openai-key.js'

/** The OpenAI-shaped APIs (JSON bodies) and SageMaker's invoke (raw bytes). */
export type RoutingApi = OpenAIApi | 'invoke'

export interface RoutingKeyOptions {
  api: RoutingApi
  /** The router's prefixLength: code points of text, or bytes of an invoke body. */
  prefixLength: number
  /**
   * The router's strategy and matchLength: a strategy matching blocks (longest_prefix) matches
   * further into the prompt than the hashed prefix reaches, so the text is kept to
   * max(prefixLength, matchLength) code points for it. Spreading `router.params` into the
   * options passes both.
   */
  strategy?: string
  matchLength?: number
  /** The X-Amzn-SageMaker-Prefix-Aware-Id header's value(s); it wins over prompt_cache_key. */
  tenant?: string | readonly string[] | undefined
  /** prompt_cache_key for a body that does not carry one (an invoke body is not parsed). */
  promptCacheKey?: string | undefined
}

interface KeyFacts {
  /** The tenant the key is scoped by: the header, else prompt_cache_key; pass it to pick(). */
  tenant: string | undefined
  /** Chat-shaped requests: where the first user message ends in `text`; pass it to pick(). */
  anchor: number | undefined
  /** OpenAI bodies: `model`, the group to pick in when instances list their models. */
  model: string | undefined
  /** OpenAI bodies: whether the client asked for a streamed answer. */
  stream: boolean
}

export type TextRoutingKey = { text: string; bytes?: never } & KeyFacts
export type BytesRoutingKey = { bytes: Uint8Array; text?: never } & KeyFacts
export type RoutingKey = TextRoutingKey | BytesRoutingKey

const APIS: readonly RoutingApi[] = ['chat', 'completions', 'embeddings', 'responses', 'rerank', 'score', 'tokenize', 'detokenize', 'invoke']

/**
 * Code points of routing text a strategy reads: one matching blocks reads up to matchLength as
 * well (as key_plan in native/strategy/request_key.cc). No strategy: the key alone.
 */
export function textSpan(prefixLength: number, strategy?: string, matchLength?: number): number {
  return strategy !== undefined && strategyInfo(strategy).blocks ? Math.max(prefixLength, matchLength ?? LIMITS.matchLength.default) : prefixLength
}

function headerOf(tenant: string | readonly string[] | undefined): string | string[] | undefined {
  return tenant === undefined || typeof tenant === 'string' ? tenant : [...tenant]
}

/** The key of an invoke request from its first prefixLength bytes (or fewer, when the body is shorter). */
export function invokeKey(prefix: Uint8Array, o: Pick<RoutingKeyOptions, 'prefixLength' | 'tenant' | 'promptCacheKey'>): BytesRoutingKey {
  const bytes = prefix.length > o.prefixLength ? prefix.subarray(0, o.prefixLength) : prefix
  return { bytes, tenant: tenantOf(headerOf(o.tenant), o.promptCacheKey), anchor: undefined, model: undefined, stream: false }
}

/** The key of an OpenAI request from its parsed body (openAIRequest, on this thread or a worker). */
export function requestKey(request: OpenAIRequest, o: Pick<RoutingKeyOptions, 'tenant' | 'promptCacheKey'>): TextRoutingKey {
  return {
    text: request.text,
    tenant: tenantOf(headerOf(o.tenant), request.promptCacheKey ?? o.promptCacheKey),
    anchor: request.anchor,
    model: request.model,
    stream: request.stream,
  }
}

/**
 * The key `serve` routes a request by: for the OpenAI APIs the prompt text (messages in order,
 * a completion's prompt, an embedding's input, a rerank query…), for invoke the first
 * prefixLength bytes; scoped by the tenant. Pass `text ?? bytes` to Router.pick with
 * `{ tenant, anchor }`. A body that cannot be routed throws a RequestError (`code`, `status`).
 */
export function routingKey(body: Uint8Array | string, o: RoutingKeyOptions & { api: OpenAIApi }): TextRoutingKey
export function routingKey(body: Uint8Array | string, o: RoutingKeyOptions & { api: 'invoke' }): BytesRoutingKey
export function routingKey(body: Uint8Array | string, o: RoutingKeyOptions): RoutingKey
export function routingKey(body: Uint8Array | string, o: RoutingKeyOptions): RoutingKey {
  if (o === null || typeof o !== 'object') throw new InvalidArgTypeError('options', 'an object', o)
  if (!APIS.includes(o.api)) throw new OutOfRangeError('api', `one of ${APIS.join(', ')}`, o.api)
  const p = LIMITS.prefixLength
  checkInt('prefixLength', o.prefixLength, p.min, p.max)
  if (o.matchLength !== undefined) checkInt('matchLength', o.matchLength, LIMITS.matchLength.min, LIMITS.matchLength.max)
  if (typeof body !== 'string' && !(body instanceof Uint8Array)) throw new InvalidArgTypeError('body', 'a Uint8Array or a string', body)
  const bytes = typeof body === 'string' ? Buffer.from(body) : body
  if (o.api === 'invoke') return invokeKey(bytes, o)
  const raw = Buffer.isBuffer(bytes) ? bytes : Buffer.from(bytes.buffer, bytes.byteOffset, bytes.byteLength)
  return requestKey(openAIRequest(o.api, raw, textSpan(o.prefixLength, o.strategy, o.matchLength)), o)
}
