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
import { upstreamFailed } from './errors.js'
import { endToEnd } from './hop-headers.js'
import type { Res } from './types.js'

/** Whether the client went away, and what to do when it does (set by forward). */
export interface ClientState {
  gone: boolean
  onGone: (() => void) | undefined
}

export interface ForwardRequest {
  instance: Instance
  method: string
  /** Path and query, as the upstream should see them (before the instance's base path). */
  path: string
  headers: IncomingHttpHeaders
  body: Buffer | AsyncIterable<Buffer>
  clientAddress: string | undefined
  secure: boolean
  client: ClientState
  /** Extra response headers (opt-in debug headers). */
  responseHeaders: Record<string, string>
  onFirstByte(): void
}

/** Connection-level failures: the request never reached the instance, so retrying elsewhere is safe. */
export function isConnectError(err: unknown): boolean {
  const code = (err as { code?: string }).code
  return code === 'ECONNREFUSED' || code === 'UND_ERR_CONNECT_TIMEOUT' || code === 'EHOSTUNREACH' || code === 'ENOTFOUND' || code === 'ECONNRESET'
}

export function upstreamError(err: unknown): ReturnType<typeof upstreamFailed> {
  const code = (err as { code?: string }).code
  if (code === 'UND_ERR_HEADERS_TIMEOUT') return upstreamFailed('upstream_timeout', 'the instance did not answer in time', 504)
  if (isConnectError(err)) return upstreamFailed('upstream_unavailable', `cannot reach the instance (${code})`)
  return upstreamFailed('upstream_error', `the instance failed: ${(err as Error).message}`)
}

function requestHeaders(f: ForwardRequest): Record<string, string | string[]> {
  const h = endToEnd(f.headers, ['host'])
  const prior = f.headers['x-forwarded-for']
  if (f.clientAddress) h['x-forwarded-for'] = prior ? `${String(prior)}, ${f.clientAddress}` : f.clientAddress
  h['x-forwarded-proto'] = f.secure ? 'https' : 'http'
  const host = f.headers.host ?? f.headers[':authority']
  if (typeof host === 'string') h['x-forwarded-host'] = host
  return h
}

const CLIENT_GONE = Object.assign(new Error('client closed the connection'), { code: 'PR_CLIENT_GONE' })

/** Resolves with the upstream status once the whole answer has been written (or the stream ended). */
export function forward(f: ForwardRequest, res: Res): Promise<number> {
  return new Promise((resolve, reject) => {
    let status = 0
    let started = false
    let first = true
    let sse = false
    const handler: Dispatcher.DispatchHandler = {
      onRequestStart(controller) {
        if (f.client.gone) controller.abort(CLIENT_GONE)
        else f.client.onGone = () => controller.abort(CLIENT_GONE)
      },
      onResponseStart(_controller, statusCode, headers) {
        if (statusCode < 200) return // 1xx: informational, the real answer follows
        status = statusCode
        started = true
        sse = String(headers['content-type'] ?? '').startsWith('text/event-stream')
        res.writeHead(statusCode, { ...endToEnd(headers), ...f.responseHeaders })
      },
      onResponseData(controller, chunk) {
        if (first) {
          f.onFirstByte()
          first = false
        }
        if (!res.write(chunk)) {
          controller.pause()
          res.once('drain', () => controller.resume())
        }
      },
      onResponseEnd() {
        if (first) f.onFirstByte()
        res.end()
        resolve(status)
      },
      onResponseError(_controller, err) {
        f.client.onGone = undefined
        if (f.client.gone) return resolve(499)
        if (!started) return reject(err)
        if (sse) {
          const code = (err as { code?: string }).code === 'UND_ERR_BODY_TIMEOUT' ? 'upstream_timeout' : 'upstream_stream_error'
          const message = `upstream stream ended early: ${upstreamError(err).message}`
          res.end(`data: ${JSON.stringify({ error: { message, type: 'upstream_error', code } })}\n\n`)
        } else {
          res.destroy(err)
        }
        resolve(502)
      },
    }
    f.instance.dispatcher.dispatch(
      {
        path: f.instance.basePath + f.path,
        method: f.method as Dispatcher.HttpMethod,
        headers: requestHeaders(f),
        body: Buffer.isBuffer(f.body) ? f.body : Readable.from(f.body, { objectMode: false }),
      },
      handler,
    )
  })
}
