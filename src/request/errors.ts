// Errors the fronts answer with, in OpenAI's shape: { "error": { message, type, code } }.
// One class, ProxyError, for every failure; what tells failures apart is its `code`, a stable
// string that tests, metrics and clients key on. The codes made here are FrontCode (each
// factory takes only those), and a front that branches on the code of a refusal made below it
// does so through isRefusal, whose RefusalCode the compiler checks the name against.
// The routing code throws RequestError (no HTTP in it); toProxyError gives it this shape.
import { RequestError, requestTooLarge } from '../core/errors.js'
import type { Leg } from '../fleet/groups.js'
import { errorTag, schemeAdvice, schemeShownBy } from '../fleet/wrong-scheme.js'

/** The codes of the failures this module makes. */
export type FrontCode =
  | 'not_found'
  | 'endpoint_not_found'
  | 'unsupported_route'
  | 'method_not_allowed'
  | 'invalid_host'
  | 'invalid_prefiller'
  | 'prefiller_not_allowed'
  | 'invalid_inference_component'
  | 'shutting_down'
  | 'request_timeout'
  | 'json_too_deep'
  | 'request_too_complex'
  | 'parser_failed'
  | 'internal_error'
  | 'upstream_timeout'
  | 'upstream_unavailable'
  | 'upstream_reset'
  | 'upstream_error'
  | 'prefill_failed'

/**
 * The codes of refusals made below the fronts that a front branches on: core/errors.ts's
 * noHealthyInstance, and the endpoint's and the scheduler's `no_${leg}_instance` for a leg
 * none of the instances left can play.
 */
export type RefusalCode = 'no_healthy_instance' | `no_${Leg}_instance`

/** Whether `err` is a refusal with one of `codes`. */
export function isRefusal(err: unknown, ...codes: readonly RefusalCode[]): err is RequestError {
  return err instanceof RequestError && (codes as readonly string[]).includes(err.code)
}

export class ProxyError extends RequestError {
  constructor(
    status: number,
    readonly type: string,
    code: string,
    message: string,
    readonly headers: Record<string, string> = {},
  ) {
    super(code, message, status)
    this.name = 'ProxyError'
  }

  body(): string {
    return JSON.stringify({ error: { message: this.message, type: this.type, code: this.code } })
  }
}

/** The answer for a request the router refuses: a RequestError with OpenAI's error type, and Retry-After when it says when to retry. */
export function toProxyError(err: RequestError): ProxyError {
  if (err instanceof ProxyError) return err
  const type = err.status === 503 ? 'service_unavailable' : err.status >= 500 ? 'server_error' : 'invalid_request_error'
  const retryAfter = err.details?.retryAfterSeconds
  return new ProxyError(err.status, type, err.code, err.message, typeof retryAfter === 'number' ? { 'retry-after': String(retryAfter) } : {})
}

// The factories: each failure's status, type and code chosen once, the code one of FrontCode.
const made = (status: number, type: string, code: FrontCode, message: string, headers?: Record<string, string>) => new ProxyError(status, type, code, message, headers)

export const badRequest = (code: FrontCode, message: string) => made(400, 'invalid_request_error', code, message)
export const forbidden = (code: FrontCode, message: string) => made(403, 'invalid_request_error', code, message)
export const notFound = (code: FrontCode, message: string) => made(404, 'invalid_request_error', code, message)
export const methodNotAllowed = (allow: string) =>
  made(405, 'invalid_request_error', 'method_not_allowed', `method not allowed; use ${allow}`, { allow })
export const tooLarge = (limit: number) => toProxyError(requestTooLarge(limit))
export const upstreamFailed = (code: FrontCode, message: string, status = 502) => made(status, 'upstream_error', code, message)
/** RFC 9112 3.2: more than one Host line. The request is malformed: nothing more on its connection is to be trusted. */
export const duplicateHost = () =>
  made(400, 'invalid_request_error', 'invalid_host', 'the request has more than one Host header line', { connection: 'close' })
export const shuttingDown = () =>
  made(503, 'service_unavailable', 'shutting_down', 'the router is shutting down; retry the request', { 'retry-after': '1' })

// The body's bounds (read-body.ts, json-shape.ts, parse-pool.ts, and serve's proxy/body.ts).
export const bodyTimeout = (ms: number) =>
  // Part of the body may still be on its way: the connection cannot carry another request.
  made(408, 'invalid_request_error', 'request_timeout', `request body not received within ${ms} ms`, { connection: 'close' })
export const tooDeep = (limit: number) =>
  // The rest of the body is left unread, so the connection cannot carry another request.
  made(400, 'invalid_request_error', 'json_too_deep', `request body nests JSON deeper than the limit of ${limit} levels`, { connection: 'close' })
export const tooComplex = (heapMb: number) =>
  made(413, 'invalid_request_error', 'request_too_complex', `request body needs more than the parser's ${heapMb} MB of memory to parse; send fewer JSON arrays and objects`)
export const parserFailed = (why: string) => made(500, 'server_error', 'parser_failed', `the request parser failed: ${why}`)

/** The endpoint picker (src/epp) failed on a request for a reason of its own, not a refusal. */
export const pickerFailed = () => made(500, 'server_error', 'internal_error', 'the endpoint picker failed on this request')

const CONNECT_CODES = new Set(['ECONNREFUSED', 'UND_ERR_CONNECT_TIMEOUT', 'EHOSTUNREACH', 'ENETUNREACH', 'ENOTFOUND', 'EAI_AGAIN'])

/** The connection could not be made: the request never reached the instance, so retrying elsewhere is safe. */
export function isConnectError(err: unknown): boolean {
  return CONNECT_CODES.has((err as { code?: string }).code ?? '')
}

/** The answer for a try that failed on its way to or from the instance (undici's error). */
export function upstreamError(err: unknown): ReturnType<typeof upstreamFailed> {
  const code = (err as { code?: string }).code
  if (code === 'UND_ERR_HEADERS_TIMEOUT') return upstreamFailed('upstream_timeout', 'the instance did not answer in time', 504)
  if (isConnectError(err)) return upstreamFailed('upstream_unavailable', `cannot reach the instance (${code})`)
  if (code === 'ECONNRESET' || code === 'UND_ERR_SOCKET') return upstreamFailed('upstream_reset', `the instance closed the connection (${code})`)
  // A URL with the wrong scheme, when the error shows it: said as such rather than as raw TLS or parser text.
  const speaks = schemeShownBy(err)
  if (speaks !== undefined) return upstreamFailed('upstream_error', `the instance failed: ${schemeAdvice(speaks)} (${errorTag(err)})`)
  return upstreamFailed('upstream_error', `the instance failed: ${(err as Error).message}`)
}
