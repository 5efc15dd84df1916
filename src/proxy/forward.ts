// Sends one request to the chosen instance and streams the answer back with backpressure.
// Errors before the response starts are thrown (the handler may retry or answer 502/504);
// errors after it started end the stream: an SSE error event for event streams, a reset
// otherwise, so a client never mistakes a truncated answer for a whole one.
import { once } from 'node:events'
import { Readable } from 'node:stream'
import type { IncomingHttpHeaders } from 'node:http'
import type { Dispatcher } from 'undici'
import type { Instance } from '../fleet/instance.js'
import { upstreamFailed } from './errors.js'
import { endToEnd } from './hop-headers.js'
import type { Res } from './types.js'

export interface ForwardRequest {
  instance: Instance
  method: string
  /** Path and query, as the upstream should see them (before the instance's base path). */
  path: string
  headers: IncomingHttpHeaders
  body: Buffer | AsyncIterable<Buffer>
  clientAddress: string | undefined
  secure: boolean
  signal: AbortSignal
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

async function writeOrWait(res: Res, chunk: Buffer): Promise<void> {
  if (res.write(chunk)) return
  // Backpressure: wait until the client drains, or goes away.
  await Promise.race([once(res, 'drain'), once(res, 'close')])
}

/** Returns the upstream status once the whole answer has been written (or the stream ended). */
export async function forward(f: ForwardRequest, res: Res): Promise<number> {
  const up: Dispatcher.ResponseData = await f.instance.dispatcher.request({
    path: f.instance.basePath + f.path,
    method: f.method as Dispatcher.HttpMethod,
    headers: requestHeaders(f),
    body: Buffer.isBuffer(f.body) ? f.body : Readable.from(f.body, { objectMode: false }),
    signal: f.signal,
  })
  const headers = { ...endToEnd(up.headers as IncomingHttpHeaders), ...f.responseHeaders }
  res.writeHead(up.statusCode, headers)
  const sse = String(up.headers['content-type'] ?? '').startsWith('text/event-stream')
  let first = true
  try {
    for await (const chunk of up.body as AsyncIterable<Buffer>) {
      if (first) {
        f.onFirstByte()
        first = false
      }
      if (f.signal.aborted) break
      await writeOrWait(res, chunk)
    }
    if (first) f.onFirstByte()
    res.end()
  } catch (err) {
    if (f.signal.aborted) return up.statusCode
    if (sse) {
      const e = upstreamError(err)
      const code = (err as { code?: string }).code === 'UND_ERR_BODY_TIMEOUT' ? 'upstream_timeout' : 'upstream_stream_error'
      res.end(`data: ${JSON.stringify({ error: { message: `upstream stream ended early: ${e.message}`, type: 'upstream_error', code } })}\n\n`)
    } else {
      res.destroy(err as Error)
    }
    return 502
  }
  return up.statusCode
}
