// Errors the proxy answers with, in OpenAI's shape: { "error": { message, type, code } }.
// One class per failure with a stable code, as undici does, so tests and metrics can key on it.

export class ProxyError extends Error {
  constructor(
    readonly status: number,
    readonly type: string,
    readonly code: string,
    message: string,
    readonly headers: Record<string, string> = {},
  ) {
    super(message)
    this.name = 'ProxyError'
  }

  body(): string {
    return JSON.stringify({ error: { message: this.message, type: this.type, code: this.code } })
  }
}

export const badRequest = (code: string, message: string) => new ProxyError(400, 'invalid_request_error', code, message)
export const notFound = (code: string, message: string) => new ProxyError(404, 'invalid_request_error', code, message)
export const methodNotAllowed = (allow: string) =>
  new ProxyError(405, 'invalid_request_error', 'method_not_allowed', `method not allowed; use ${allow}`, { allow })
export const tooLarge = (limit: number) =>
  new ProxyError(413, 'invalid_request_error', 'request_too_large', `request body exceeds the limit of ${limit} bytes`)
export const noHealthyInstance = (endpoint: string, retryAfterSeconds: number) =>
  new ProxyError(503, 'service_unavailable', 'no_healthy_instance', `no healthy instance for endpoint '${endpoint}'`, {
    'retry-after': String(retryAfterSeconds),
  })
export const upstreamFailed = (code: string, message: string, status = 502) => new ProxyError(status, 'upstream_error', code, message)
export const shuttingDown = () =>
  new ProxyError(503, 'service_unavailable', 'shutting_down', 'the router is shutting down; retry the request', { 'retry-after': '1' })
