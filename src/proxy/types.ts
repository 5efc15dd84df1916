import type { IncomingMessage, OutgoingHttpHeaders } from 'node:http'
import type { Http2ServerRequest } from 'node:http2'
import type { HeaderList } from './hop-headers.js'

/** The front server hands requests over HTTP/1.1 and HTTP/2 (compat API) alike. */
export type Req = IncomingMessage | Http2ServerRequest

/** What the proxy uses of ServerResponse and Http2ServerResponse, which share it. */
export interface Res extends NodeJS.EventEmitter {
  write(chunk: Buffer | string): boolean
  end(chunk?: Buffer | string): unknown
  /** Headers as an object or as a flat name, value, … list (both Node responses take either). */
  writeHead(status: number, headers?: OutgoingHttpHeaders | HeaderList): unknown
  destroy(err?: Error): unknown
  readonly headersSent: boolean
  readonly writableEnded: boolean
}
