// Sends one request to the chosen instance and streams the answer back with backpressure,
// through undici's dispatch API (no intermediate body stream: each upstream chunk is written
// to the client as it arrives, and the upstream read pauses while the client is full).
// Errors before the response starts reject (the handler may retry or answer 502/504);
// errors after it started end the stream: an SSE error event for event streams, a reset
// otherwise, so a client never mistakes a truncated answer for a whole one.
import type { IncomingHttpHeaders } from 'node:http'
import { Readable } from 'node:stream'
import type { Dispatcher } from 'undici'
import type { Instance } from '../fleet/instance.js'
import { isAwsCredential } from './aws-credentials.js'
import { isFramed } from './broken-stream.js'
import { upstreamError } from '../request/errors.js'
import { connectionTokens, endToEndRaw, isConnectionHeader, valueOf, type HeaderList } from './hop-headers.js'
import { REQUEST_ID_HEADER } from '../request/request-id.js'
import type { Res } from './types.js'
import { PrefixRouterError } from '../core/errors.js'

/** Whether the client went away or the router is ending the request, and how to stop its upstream request. */
export interface ClientState {
  gone: boolean
  /** The router is ending this request because it is shutting down (set by the drain). */
  shutdown: boolean
  /**
   * Aborts the upstream request while one is open (undici's own abort, so no closure is made
   * for it): with CLIENT_GONE when the client leaves, SHUTDOWN when the drain ends the request.
   */
  abort: ((err: Error) => void) | undefined
  /**
   * An abort asked for while no upstream request was open: the next one is aborted with it as
   * it connects (a disaggregated request's prefill leg failing before its decode leg connected).
   */
  abortNext?: Error | undefined
}

export interface ForwardRequest {
  instance: Instance
  method: string
  /** Path and query, as the upstream should see them (before the instance's base path). */
  path: string
  headers: IncomingHttpHeaders
  /** Sent as X-Request-Id in place of whatever the client sent. */
  requestId: string
  /** The trace context headers (traceparent) of the try; undefined when tracing is off. */
  traceHeaders?(): Record<string, string> | undefined
  body: Buffer | AsyncIterable<Buffer>
  clientAddress: string | undefined
  secure: boolean
  client: ClientState
  /**
   * The router's headers on the answer, in place of any of those names the instance sent: the
   * request id always, the opt-in debug headers, SageMaker's variant.
   */
  responseHeaders: Readonly<Record<string, string>>
  /** Time allowed for the response headers (undefined: the dispatcher's headersTimeout). */
  headersTimeoutMs: number | undefined
  /**
   * Called with a 502/503/504 before anything is written to the client: true discards the
   * answer (the request is then rejected with an UpstreamStatusError and tried elsewhere).
   * With `refusable`, 4xx answers are offered too (a decode leg whose instance may refuse the
   * KV parameters it carries).
   */
  retryStatus(status: number): boolean
  /** A 4xx may be the instance refusing what the router added to the body, not the client's request. */
  readonly refusable: boolean
  /** The instance's answer started (headers passed on to the client) with this status. */
  onResponse(status: number): void
  /** The answer broke off after it started (not by the client or a shutdown). */
  onCut(): void
  /** The answer's first byte came from the instance at `at` (performance.now()). */
  onFirstByte(at: number): void
}

/** A try whose answer was a retryable status, discarded before the client saw it. */
export class UpstreamStatusError extends PrefixRouterError {
  declare readonly code: 'PR_UPSTREAM_STATUS'
  constructor(readonly status: number) {
    super('PR_UPSTREAM_STATUS', `the instance answered ${status}`)
    this.name = 'UpstreamStatusError'
  }
}

/**
 * Ends a decode leg whose prefill leg failed while both ran at once (SGLang's flow): the decode
 * instance waits for a KV cache that will not come, so its try is aborted with this and the
 * pair tried again.
 */
export class PrefillLegFailed extends PrefixRouterError {
  declare readonly code: 'PR_PREFILL_LEG_FAILED'
  constructor(readonly reason: string) {
    super('PR_PREFILL_LEG_FAILED', `the prefill leg failed (${reason})`)
    this.name = 'PrefillLegFailed'
  }
}

/** Whether the whole request had been written when a try failed (set on errors forward rejects with). */
export function requestWasSent(err: unknown): boolean {
  return (err as { requestSent?: boolean }).requestSent === true
}

/**
 * The instance reset the connection before any byte of an answer (not even a 100 Continue).
 * A reset says its socket did not take what was written: the socket was closed when the bytes
 * arrived, or closed with them unread. That is what an instance closing an idle keep-alive
 * connection as a request is written to it looks like, so the request may be sent again.
 */
export function resetUnanswered(err: unknown): boolean {
  const e = err as { code?: string; answered?: boolean }
  return (e.code === 'ECONNRESET' || e.code === 'EPIPE') && e.answered === false
}

/**
 * The client's headers as the instance gets them, as the flat list undici takes without
 * walking an object: end-to-end ones only, no AWS credentials, and the router's own
 * X-Forwarded-*, X-Request-Id and trace context in place of any the client sent.
 */
export function requestHeaders(f: Pick<ForwardRequest, 'headers' | 'traceHeaders' | 'body' | 'clientAddress' | 'secure' | 'requestId'>): HeaderList {
  const h = f.headers
  const trace = f.traceHeaders?.()
  const prior = h['x-forwarded-for']
  const host = h.host ?? h[':authority']
  const named = connectionTokens(h.connection)
  // undici frames a buffer by its own length (checked against any declared one, so it can
  // only agree): a header it would parse and validate for nothing.
  const whole = Buffer.isBuffer(f.body)
  const out: HeaderList = []
  // Node gives the names lowercase, on HTTP/1.1 and HTTP/2 alike.
  for (const name in h) {
    const value = h[name]
    if (value === undefined || isConnectionHeader(name, named) || isAwsCredential(name, value)) continue
    if (name === 'host' || name === 'x-forwarded-proto' || name === REQUEST_ID_HEADER || (whole && name === 'content-length')) continue
    if ((name === 'x-forwarded-for' && f.clientAddress) || (name === 'x-forwarded-host' && typeof host === 'string')) continue
    if (trace !== undefined && Object.hasOwn(trace, name)) continue
    if (typeof value === 'string') out.push(name, value)
    else for (const v of value) out.push(name, v)
  }
  if (f.clientAddress) out.push('x-forwarded-for', prior ? `${String(prior)}, ${f.clientAddress}` : f.clientAddress)
  out.push('x-forwarded-proto', f.secure ? 'https' : 'http')
  if (typeof host === 'string') out.push('x-forwarded-host', host)
  out.push(REQUEST_ID_HEADER, f.requestId)
  if (trace !== undefined) for (const name in trace) out.push(name, trace[name]!)
  return out
}

export const CLIENT_GONE = new PrefixRouterError('PR_CLIENT_GONE', 'client closed the connection')
export const SHUTDOWN = new PrefixRouterError('PR_SHUTDOWN', 'the router is shutting down')

/**
 * The request went out whole. undici's handler API does not report it (onRequestSent belongs
 * to its legacy API, which UnwrapHandler does not pass on), and it decides whether a reset may
 * be retried. undici writes a buffer body in the same turn as it starts the request
 * (onRequestStart) and fails it in that turn if the write throws, so a try that has not
 * failed by the next tick has been written; a streamed body, when its last chunk was read
 * (it is never retried, so the mark is only what the error says).
 */
function markSent(u: Upstream): void {
  if (!u.failed) u.sent = true
}

/**
 * The answer's headers as undici read them (name, value, ... as Buffers, over HTTP/1.1 and
 * HTTP/2 alike), so that they pass in the instance's order; from the parsed object otherwise.
 */
function rawHeaders(c: Dispatcher.DispatchController, parsed: IncomingHttpHeaders): readonly (Buffer | string)[] {
  const raw = c.rawHeaders
  if (Array.isArray(raw)) return raw
  const out: string[] = []
  for (const name in parsed) {
    const v = parsed[name]
    if (typeof v === 'string') out.push(name, v)
    else if (v !== undefined) for (const one of v) out.push(name, one)
  }
  return out
}

/** One object per try, its callbacks methods rather than closures. */
class Upstream implements Dispatcher.DispatchHandler {
  status = 0
  started = false
  first = true
  sse = false
  sent = false
  failed = false
  /** Any answer came, a 1xx included: the instance read the request. */
  answered = false
  retryWith = 0
  controller: Dispatcher.DispatchController | undefined = undefined
  #onDrain: (() => void) | undefined = undefined

  constructor(
    readonly f: ForwardRequest,
    readonly res: Res,
    readonly resolve: (status: number) => void,
    readonly reject: (err: unknown) => void,
  ) {}

  onRequestStart(controller: Dispatcher.DispatchController): void {
    const { client } = this.f
    this.controller = controller
    if (client.gone) controller.abort(CLIENT_GONE)
    else if (client.shutdown) controller.abort(SHUTDOWN)
    else if (client.abortNext !== undefined) {
      const err = client.abortNext
      client.abortNext = undefined
      controller.abort(err)
    } else {
      client.abort = controller.abort.bind(controller)
      if (Buffer.isBuffer(this.f.body)) process.nextTick(markSent, this)
    }
  }

  onResponseStart(controller: Dispatcher.DispatchController, statusCode: number, parsed: IncomingHttpHeaders): void {
    const { f, res } = this
    this.answered = true
    if (statusCode < 200) return // 1xx: informational, the real answer follows
    if ((statusCode === 502 || statusCode === 503 || statusCode === 504 || (statusCode >= 400 && statusCode < 500 && f.refusable)) && f.retryStatus(statusCode)) {
      // Read to its end and dropped (error bodies are small): aborting would close a
      // keep-alive connection for every retried answer.
      this.retryWith = statusCode
      return
    }
    this.status = statusCode
    this.started = true
    f.onResponse(statusCode)
    // Ours win over the instance's: the request id it may echo, and the debug headers.
    const headers = endToEndRaw(rawHeaders(controller, parsed), f.responseHeaders)
    const type = valueOf(headers, 'content-type')
    this.sse = type !== undefined && type.startsWith('text/event-stream')
    res.writeHead(statusCode, headers)
  }

  onResponseData(controller: Dispatcher.DispatchController, chunk: Buffer): void {
    if (this.retryWith !== 0) return
    let more: boolean
    if (this.first) {
      // Passed on before it is counted: the client's first byte waits for none of our bookkeeping.
      const at = performance.now()
      this.first = false
      more = this.res.write(chunk)
      this.f.onFirstByte(at)
    } else more = this.res.write(chunk)
    if (more) return
    controller.pause()
    this.res.once('drain', (this.#onDrain ??= () => this.controller?.resume()))
  }

  onResponseEnd(): void {
    const { f } = this
    f.client.abort = undefined
    if (this.retryWith !== 0) return this.reject(Object.assign(new UpstreamStatusError(this.retryWith), { requestSent: true }))
    if (this.first) f.onFirstByte(performance.now())
    this.res.end()
    this.resolve(this.status)
  }

  /** `controller` is undefined when the dispatcher refused the request before starting it. */
  onResponseError(_controller: Dispatcher.DispatchController | undefined, err: Error): void {
    const { f, res } = this
    this.failed = true
    f.client.abort = undefined
    if (f.client.gone) return this.resolve(499)
    if (this.retryWith !== 0) return this.reject(Object.assign(new UpstreamStatusError(this.retryWith), { requestSent: true }))
    if (!this.started) return this.reject(Object.assign(err, { requestSent: this.sent, answered: this.answered }))
    if (err === SHUTDOWN) {
      // Mid-answer: an event stream is told why it ends; any other body is cut, not passed as whole.
      const shutdown = { message: 'the router is shutting down; retry the request', type: 'server_error', code: 'shutdown' as const }
      if (isFramed(res)) res.fail(shutdown)
      else if (this.sse) res.end(`data: ${JSON.stringify({ error: shutdown })}\n\n`)
      else res.destroy()
      return this.resolve(this.status)
    }
    f.onCut()
    const code = (err as { code?: string }).code === 'UND_ERR_BODY_TIMEOUT' ? 'upstream_timeout' : 'upstream_stream_error'
    const message = `upstream stream ended early: ${upstreamError(err).message}`
    if (isFramed(res)) res.fail({ message, type: 'upstream_error', code })
    else if (this.sse) res.end(`data: ${JSON.stringify({ error: { message, type: 'upstream_error', code } })}\n\n`)
    else res.destroy(err)
    this.resolve(502)
  }
}

/** Resolves with the upstream status once the whole answer has been written (or the stream ended). */
export function forward(f: ForwardRequest, res: Res, dispatcher: Dispatcher = f.instance.dispatcher): Promise<number> {
  return new Promise((resolve, reject) => {
    const options: Dispatcher.DispatchOptions = {
      path: f.instance.basePath + f.path,
      method: f.method as Dispatcher.HttpMethod,
      headers: requestHeaders(f),
      body: Buffer.isBuffer(f.body) ? f.body : Readable.from(f.body, { objectMode: false }),
    }
    if (f.headersTimeoutMs !== undefined) options.headersTimeout = f.headersTimeoutMs
    const upstream = new Upstream(f, res, resolve, reject)
    if (options.body instanceof Readable) options.body.once('end', () => process.nextTick(markSent, upstream))
    dispatcher.dispatch(options, upstream)
  })
}

/**
 * forward() on a connection of its own, closed after the answer: for a request sent again
 * after resetUnanswered, which on the shared pool could land on another connection the
 * instance is closing.
 */
export async function forwardFresh(f: ForwardRequest, res: Res): Promise<number> {
  const d = f.instance.oneConnection()
  try {
    return await forward(f, res, d)
  } finally {
    void d.close().catch(() => undefined)
  }
}
