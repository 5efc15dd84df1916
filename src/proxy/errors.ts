// Errors the proxy answers with, in OpenAI's shape: { "error": { message, type, code } }.
// One class per failure with a stable code, as undici does, so tests and metrics can key on it.
// The routing code throws RequestError (no HTTP in it); toProxyError gives it this shape.
import { noHealthyInstance as noHealthy, RequestError, requestTooLarge } from '../core/errors.js'

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
export const notFound = (code: string, message: string) => new ProxyError(404, 'invalid_request_error', code, message)
export const methodNotAllowed = (allow: string) =>
  new ProxyError(405, 'invalid_request_error', 'method_not_allowed', `method not allowed; use ${allow}`, { allow })
export const tooLarge = (limit: number) => toProxyError(requestTooLarge(limit))
export const noHealthyInstance = (endpoint: string, retryAfterSeconds: number) => toProxyError(noHealthy(endpoint, retryAfterSeconds))
export const upstreamFailed = (code: string, message: string, status = 502) => new ProxyError(status, 'upstream_error', code, message)
export const shuttingDown = () =>
  new ProxyError(503, 'service_unavailable', 'shutting_down', 'the router is shutting down; retry the request', { 'retry-after': '1' })
