// An instance that closes an idle HTTP/1.1 connection cleanly (a FIN, nothing unread) just as
// the router writes a request to it never reads that request: the bytes reach a closed
// socket, and the instance's kernel answers them with a reset. undici reads the FIN first and
// reports 'other side closed' (UND_ERR_SOCKET), the same error as for an instance that read
// the request and then closed, which must not be sent again. The router's kernel can tell
// the two apart: after the reset the connection is closed, and getpeername fails (ENOTCONN);
// after a FIN alone it is half-open (CLOSE_WAIT), and getpeername succeeds. This connector
// looks when the FIN is read, before undici's own 'end' handler, and turns the first case
// into the reset it was (ECONNRESET), which the stale-connection rule sends again.
//
// Over a network the reset comes a round trip after the request, and can come after the FIN
// is read: the connection is then still half-open, the error stays UND_ERR_SOCKET and the
// request is not sent again (the safe side). keepAliveTimeoutMs, below the instance's own
// idle timeout, is what keeps that race rare.
import type { Socket } from 'node:net'
import type { buildConnector } from 'undici'
import { PrefixRouterError } from '../core/errors.js'

/** Node's socket handle; getpeername returns 0 or a negative libuv error code. */
interface PeerHandle {
  getpeername?(out: object): number
}

/**
 * The code is that of the reset it is (the kernel did receive one): whatever handles a reset
 * (resetUnanswered, the retries, the 502's code) handles this the same way.
 */
export class ClosedUnreadError extends PrefixRouterError {
  declare readonly code: 'ECONNRESET'
  constructor() {
    super('ECONNRESET', 'the instance closed the connection as the request was written, and reset it unread')
    this.name = 'ClosedUnreadError'
  }
}

/** Whether the peer reset the connection after its FIN: what it was sent after closing, it never read. */
export function resetAfterFin(socket: Socket): boolean {
  const handle = (socket as unknown as { _handle?: PeerHandle | null })._handle
  if (typeof handle?.getpeername !== 'function') return false
  return handle.getpeername({}) !== 0
}

/** `connect` wrapped: each socket it makes reports a FIN followed by a reset as ClosedUnreadError. */
export function reportClosedUnread(connect: buildConnector.connector): buildConnector.connector {
  return (options, callback) =>
    connect(options, (err, socket) => {
      if (err !== null) return callback(err, null)
      // Ahead of undici's 'end' handler, which destroys the socket as 'other side closed'.
      socket!.prependOnceListener('end', () => {
        if (resetAfterFin(socket!)) socket!.destroy(new ClosedUnreadError())
      })
      callback(null, socket!)
    })
}
