// Sends one request to the chosen instance and streams the answer back with backpressure,
// through undici's dispatch API (no intermediate body stream: each upstream chunk is written
// to the client as it arrives, and the upstream read pauses while the client is full).
// Errors before the response starts reject (the handler may retry or answer 502/504);
// errors after it started end the stream: an SSE error event for event streams, a reset
// otherwise, so a client never mistakes a truncated answer for a whole one.
import type { IncomingHttpHeaders } from 'node:http'
import { Readable } from 'node:stream'
import { util, type Dispatcher } from 'undici'
import type { Instance } from '../fleet/instance.js'
import { withoutAwsCredentials } from './aws-credentials.js'
import { isFramed } from './broken-stream.js'
import { upstreamFailed } from './errors.js'
import { endToEnd } from './hop-headers.js'
import { REQUEST_ID_HEADER } from './request-id.js'
import type { Res } from './types.js'
import { PrefixRouterError } from '../core/errors.js'

/** Whether the client went away, and what to do when it does (set by forward). */
export interface ClientState {
  gone: boolean
  onGone: (() => void) | undefined
  /** The router is ending this request because it is shutting down (set by the drain). */
  shutdown: boolean
  /** Ends the request for the shutdown: set while an upstream request is open. */
  onShutdown: (() => void) | undefined
}

export interface ForwardRequest {
  instance: Instance
  method: string
  /** Path and query, as the upstream should see them (before the instance's base path). */
  path: string
  headers: IncomingHttpHeaders
  /** Sent as X-Request-Id in place of whatever the client sent. */
  requestId: string
  /** Adds the trace context headers (traceparent) of the try, when a propagator is registered. */
  traceHeaders?(headers: Record<string, string | string[]>): void
  body: Buffer | AsyncIterable<Buffer>
  clientAddress: string | undefined
  secure: boolean
  client: ClientState
  /** Extra response headers (opt-in debug headers). */
  responseHeaders: Record<string, string>
  /** Time allowed for the response headers (undefined: the dispatcher's headersTimeout). */
  headersTimeoutMs: number | undefined
  /**
   * Called with a 502/503/504 before anything is written to the client: true discards the
   * answer (the request is then rejected with an UpstreamStatusError and tried elsewhere).
   */
  retryStatus(status: number): boolean
  /** The instance's answer started (headers passed on to the client) with this status. */
  onResponse(status: number): void
  /** The answer broke off after it started (not by the client or a shutdown). */
  onCut(): void
  onFirstByte(): void
}

/** A try whose answer was a retryable status, discarded before the client saw it. */
export class UpstreamStatusError extends PrefixRouterError {
  declare readonly code: 'PR_UPSTREAM_STATUS'
  constructor(readonly status: number) {
    super('PR_UPSTREAM_STATUS', `the instance answered ${status}`)
    this.name = 'UpstreamStatusError'
  }
}

const CONNECT_CODES = new Set(['ECONNREFUSED', 'UND_ERR_CONNECT_TIMEOUT', 'EHOSTUNREACH', 'ENETUNREACH', 'ENOTFOUND', 'EAI_AGAIN'])

/** The connection could not be made: the request never reached the instance, so retrying elsewhere is safe. */
export function isConnectError(err: unknown): boolean {
  return CONNECT_CODES.has((err as { code?: string }).code ?? '')
}

/** Whether the whole request had been written when a try failed (set on errors forward rejects with). */
export function requestWasSent(err: unknown): boolean {
  return (err as { requestSent?: boolean }).requestSent === true
}

export function upstreamError(err: unknown): ReturnType<typeof upstreamFailed> {
  const code = (err as { code?: string }).code
  if (code === 'UND_ERR_HEADERS_TIMEOUT') return upstreamFailed('upstream_timeout', 'the instance did not answer in time', 504)
  if (isConnectError(err)) return upstreamFailed('upstream_unavailable', `cannot reach the instance (${code})`)
  if (code === 'ECONNRESET' || code === 'UND_ERR_SOCKET') return upstreamFailed('upstream_reset', `the instance closed the connection (${code})`)
  return upstreamFailed('upstream_error', `the instance failed: ${(err as Error).message}`)
}

function requestHeaders(f: ForwardRequest): Record<string, string | string[]> {
  const h = withoutAwsCredentials(endToEnd(f.headers, ['host']))
  const prior = f.headers['x-forwarded-for']
  if (f.clientAddress) h['x-forwarded-for'] = prior ? `${String(prior)}, ${f.clientAddress}` : f.clientAddress
  h['x-forwarded-proto'] = f.secure ? 'https' : 'http'
  const host = f.headers.host ?? f.headers[':authority']
  if (typeof host === 'string') h['x-forwarded-host'] = host
  h[REQUEST_ID_HEADER] = f.requestId
  f.traceHeaders?.(h)
  return h
}

const CLIENT_GONE = new PrefixRouterError('PR_CLIENT_GONE', 'client closed the connection')
export const SHUTDOWN = new PrefixRouterError('PR_SHUTDOWN', 'the router is shutting down')

/** Resolves with the upstream status once the whole answer has been written (or the stream ended). */
export function forward(f: ForwardRequest, res: Res): Promise<number> {
  return new Promise((resolve, reject) => {
    let status = 0
    let started = false
    let first = true
    let sse = false
    let sent = false
    let retryWith = 0
    let resume: (() => void) | undefined
    const onDrain = () => resume?.()
    // undici's handler interface in its original form: the only one that reports when the
    // request has been written (onRequestSent), which decides whether a reset may be retried.
    const handler = {
      onConnect(abort: (err?: Error) => void) {
        if (f.client.gone) abort(CLIENT_GONE)
        else if (f.client.shutdown) abort(SHUTDOWN)
        else {
          f.client.onGone = () => abort(CLIENT_GONE)
          f.client.onShutdown = () => abort(SHUTDOWN)
        }
      },
      onRequestSent() {
        sent = true
      },
      onHeaders(statusCode: number, raw: Buffer[], resumeFn: () => void): boolean {
        if (statusCode < 200) return true // 1xx: informational, the real answer follows
        if ((statusCode === 502 || statusCode === 503 || statusCode === 504) && f.retryStatus(statusCode)) {
          // Read to its end and dropped (error bodies are small): aborting would close a
          // keep-alive connection for every retried answer.
          retryWith = statusCode
          return true
        }
        status = statusCode
        started = true
        f.onResponse(statusCode)
        resume = resumeFn
        const headers = util.parseHeaders(raw)
        sse = String(headers['content-type'] ?? '').startsWith('text/event-stream')
        res.writeHead(statusCode, { ...endToEnd(headers), ...f.responseHeaders })
        return true
      },
      onData(chunk: Buffer): boolean {
        if (retryWith !== 0) return true
        if (first) {
          f.onFirstByte()
          first = false
        }
        if (res.write(chunk)) return true
        res.once('drain', onDrain)
        return false
      },
      onComplete() {
        f.client.onGone = undefined
        f.client.onShutdown = undefined
        if (retryWith !== 0) return reject(Object.assign(new UpstreamStatusError(retryWith), { requestSent: true }))
        if (first) f.onFirstByte()
        res.end()
        resolve(status)
      },
      onError(err: Error) {
        f.client.onGone = undefined
        f.client.onShutdown = undefined
        if (f.client.gone) return resolve(499)
        if (retryWith !== 0) return reject(Object.assign(new UpstreamStatusError(retryWith), { requestSent: true }))
        if (!started) return reject(Object.assign(err, { requestSent: sent }))
        if (err === SHUTDOWN) {
          // Mid-answer: an event stream is told why it ends; any other body is cut, not passed as whole.
          const shutdown = { message: 'the router is shutting down; retry the request', type: 'server_error', code: 'shutdown' }
          if (isFramed(res)) res.fail(shutdown)
          else if (sse) res.end(`data: ${JSON.stringify({ error: shutdown })}\n\n`)
          else res.destroy()
          return resolve(status)
        }
        f.onCut()
        const code = (err as { code?: string }).code === 'UND_ERR_BODY_TIMEOUT' ? 'upstream_timeout' : 'upstream_stream_error'
        const message = `upstream stream ended early: ${upstreamError(err).message}`
        if (isFramed(res)) res.fail({ message, type: 'upstream_error', code })
        else if (sse) res.end(`data: ${JSON.stringify({ error: { message, type: 'upstream_error', code } })}\n\n`)
        else res.destroy(err)
        resolve(502)
      },
    }
    f.instance.dispatcher.dispatch(
      {
        path: f.instance.basePath + f.path,
        method: f.method as Dispatcher.HttpMethod,
        headers: requestHeaders(f),
        body: Buffer.isBuffer(f.body) ? f.body : Readable.from(f.body, { objectMode: false }),
        ...(f.headersTimeoutMs !== undefined && { headersTimeout: f.headersTimeoutMs }),
      },
      handler as unknown as Dispatcher.DispatchHandler,
    )
  })
}
