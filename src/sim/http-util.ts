// The few things the worker needs from a request/response pair, for HTTP/1.1
// (IncomingMessage/ServerResponse) and h2c (the http2 compatibility API) alike.
import type { IncomingMessage, ServerResponse } from 'node:http'
import { constants as h2, type Http2ServerRequest, type Http2ServerResponse } from 'node:http2'
import { ApiError, errorBody } from './openai-shapes.js'

export type Req = IncomingMessage | Http2ServerRequest
export type Res = ServerResponse | Http2ServerResponse

/** Bodies above this are refused (413); vLLM's longest contexts are a few MB of text. */
export const MAX_BODY_BYTES = 64 * 1024 * 1024

export function readBody(req: Req, limit = MAX_BODY_BYTES): Promise<string> {
  return new Promise((resolve, reject) => {
    const chunks: Buffer[] = []
    let size = 0
    let failed = false
    req.on('data', (c: Buffer) => {
      if (failed) return
      size += c.length
      if (size > limit) {
        failed = true
        reject(new ApiError(413, `Request body larger than ${limit} bytes.`, 'RequestEntityTooLarge'))
        return
      }
      chunks.push(c)
    })
    req.on('end', () => {
      if (!failed) resolve(Buffer.concat(chunks).toString('utf8'))
    })
    req.on('error', (err) => {
      if (!failed) reject(err)
    })
  })
}

export function parseJson(raw: string): unknown {
  try {
    return JSON.parse(raw)
  } catch (err) {
    throw new ApiError(400, `Invalid JSON body: ${(err as Error).message}`, 'BadRequestError')
  }
}

export function send(res: Res, status: number, contentType: string, body: string): void {
  if (res.headersSent) {
    destroy(res)
    return
  }
  ;(res as ServerResponse).writeHead(status, {
    'content-type': contentType,
    'content-length': Buffer.byteLength(body),
  })
  ;(res as ServerResponse).end(body)
}

export function sendJson(res: Res, status: number, body: unknown): void {
  send(res, status, 'application/json', typeof body === 'string' ? body : JSON.stringify(body))
}

export function sendError(res: Res, err: ApiError): void {
  send(res, err.status, 'application/json', errorBody(err.status, err.message, err.type, err.param))
}

export function write(res: Res, chunk: string): boolean {
  return (res as ServerResponse).write(chunk)
}

/**
 * Ends the exchange without a proper response: the socket (h1) or the stream (h2) is
 * reset. With `flush`, what was already written reaches the client first (h1: the socket
 * is closed after its queue drains, so the body is cut short instead of lost).
 */
export function destroy(res: Res, flush = false): void {
  if ('stream' in res && res.stream !== undefined) {
    if (!res.stream.destroyed) res.stream.close(h2.NGHTTP2_INTERNAL_ERROR)
    return
  }
  const r = res as ServerResponse
  if (flush && r.socket !== null && !r.socket.destroyed) r.socket.destroySoon()
  else r.destroy()
}
