// The request id: the client's X-Request-Id when it is usable, else one of our own. It goes
// upstream (vLLM takes it as its request id and logs it), back on every answer, and into the
// access log, so one id finds a request in the client's, the router's and the instance's logs.
import { randomUUID } from 'node:crypto'

export const REQUEST_ID_HEADER = 'x-request-id'
// Printable ASCII only: it is copied into headers and log lines verbatim.
const VALID = /^[\x20-\x7e]{1,200}$/

export interface RequestId {
  id: string
  /** The client sent one that was unusable (repeated, empty, too long, not printable ASCII). */
  replaced: boolean
}

/**
 * A random UUID when the client sent none: about 0.2 µs here against 0.03 µs for a
 * process prefix and a counter, a cost lost in a request's, for ids unique across router
 * replicas and restarts without any coordination, in the shape vLLM makes its own.
 */
export function requestIdOf(header: string | string[] | undefined): RequestId {
  if (typeof header === 'string' && VALID.test(header)) return { id: header, replaced: false }
  return { id: randomUUID(), replaced: header !== undefined }
}
