// Errors the proxy answers with, in OpenAI's shape: { "error": { message, type, code } }.
// One class per failure with a stable code, as undici does, so tests and metrics can key on it.
// The routing code throws RequestError (no HTTP in it); toProxyError gives it this shape.
import { noHealthyInstance as noHealthy, RequestError, requestTooLarge } from '../core/errors.js'
import { errorTag, schemeAdvice, schemeShownBy } from '../fleet/wrong-scheme.js'

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

export const badRequest = (code: string, message: string) => new ProxyError(400, 'invalid_request_error', code, message)
export const forbidden = (code: string, message: string) => new ProxyError(403, 'invalid_request_error', code, message)
export const notFound = (code: string, message: string) => new ProxyError(404, 'invalid_request_error', code, message)
export const methodNotAllowed = (allow: string) =>
  new ProxyError(405, 'invalid_request_error', 'method_not_allowed', `method not allowed; use ${allow}`, { allow })
export const tooLarge = (limit: number) => toProxyError(requestTooLarge(limit))
export const noHealthyInstance = (endpoint: string, retryAfterSeconds: number) => toProxyError(noHealthy(endpoint, retryAfterSeconds))
export const upstreamFailed = (code: string, message: string, status = 502) => new ProxyError(status, 'upstream_error', code, message)
/** RFC 9112 3.2: more than one Host line. The request is malformed: nothing more on its connection is to be trusted. */
export const duplicateHost = () =>
  new ProxyError(400, 'invalid_request_error', 'invalid_host', 'the request has more than one Host header line', { connection: 'close' })
export const shuttingDown = () =>
  new ProxyError(503, 'service_unavailable', 'shutting_down', 'the router is shutting down; retry the request', { 'retry-after': '1' })

// The body's bounds (body.ts, json-shape.ts, parse-pool.ts).
export const bodyTimeout = (ms: number) =>
  // Part of the body may still be on its way: the connection cannot carry another request.
  new ProxyError(408, 'invalid_request_error', 'request_timeout', `request body not received within ${ms} ms`, { connection: 'close' })
export const tooDeep = (limit: number) =>
  // The rest of the body is left unread, so the connection cannot carry another request.
  new ProxyError(400, 'invalid_request_error', 'json_too_deep', `request body nests JSON deeper than the limit of ${limit} levels`, { connection: 'close' })
export const tooComplex = (heapMb: number) =>
  new ProxyError(413, 'invalid_request_error', 'request_too_complex', `request body needs more than the parser's ${heapMb} MB of memory to parse; send fewer JSON arrays and objects`)
export const parserFailed = (why: string) => new ProxyError(500, 'server_error', 'parser_failed', `the request parser failed: ${why}`)

/** The endpoint picker (src/epp) failed on a request for a reason of its own, not a refusal. */
export const pickerFailed = () => new ProxyError(500, 'server_error', 'internal_error', 'the endpoint picker failed on this request')

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
