// Whether nghttp2 is finished with an HTTP/2 session: it wants neither to read nor to write,
// the state in which nghttp2 says the application should drop the connection. A session gets
// there after it sent GOAWAY for a connection error (a flood of reset streams, a malformed
// frame), or after GOAWAY both ways with no stream left. Node closes the socket only when it
// closed the session itself: one nghttp2 ended on its own stops reading its socket and is
// left open, the peer's FIN unseen, until some timer ends it. Node tells this only through
// the session's native handle (hasPendingData: nghttp2 wants to read or write).
import type http2 from 'node:http2'

interface NativeSession {
  hasPendingData?: () => boolean
}

let handleKey: symbol | undefined

/** Whether the session is done by nghttp2's account; false when Node does not say (no handle, or a Node without hasPendingData). */
export function nghttp2Finished(session: http2.Http2Session): boolean {
  handleKey ??= Object.getOwnPropertySymbols(session).find((k) => k.description === 'kHandle')
  if (handleKey === undefined) return false
  const handle = (session as unknown as Record<symbol, NativeSession | undefined>)[handleKey]
  return typeof handle?.hasPendingData === 'function' && !handle.hasPendingData()
}
