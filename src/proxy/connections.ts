// The front door's connections, for client limits and a graceful drain. Node's HTTP/1.1 server
// has timeouts of its own (headersTimeout, keepAliveTimeout); an HTTP/2 session has none that
// tell a session waiting for its next request from one whose stream is quiet (a queued SSE
// stream sends nothing for a while), so sessions get deadlines here, by open streams.
import type http from 'node:http'
import type http2 from 'node:http2'
import type net from 'node:net'
import { nghttp2Finished } from '../net/h2-finished.js'
import { checkingIntervalMs } from '../runtime/h1-options.js'
import type { Req, Res } from './types.js'

type Handler = (req: Req, res: Res) => void

/** Responses of the connection not yet closed, kept on the socket rather than in a Map looked up twice a request. */
const OPEN = Symbol('open responses')
type H1Socket = net.Socket & { [OPEN]?: number }

export interface ClientTimeouts {
  /** From a session's start to its first request (0: none). */
  headersTimeoutMs: number
  /** From a session's last stream closing to the next one opening (0: none). */
  keepAliveTimeoutMs: number
}

export class FrontConnections {
  readonly #sockets = new Set<net.Socket>()
  /** Connections that carried an HTTP/1.1 request (their responses not yet closed are counted on them, OPEN). */
  readonly #h1 = new Set<H1Socket>()
  readonly #sessions = new Set<http2.ServerHttp2Session>()
  #draining = false
  #sweep: NodeJS.Timeout | undefined

  constructor(readonly timeouts: ClientTimeouts) {}

  /** Every accepted TCP connection, so that it can be counted and, at the end, destroyed. */
  readonly accepted = (socket: net.Socket): void => {
    this.#sockets.add(socket)
    socket.once('close', () => this.#sockets.delete(socket))
    socket.on('error', () => socket.destroy())
  }

  readonly session = (s: http2.ServerHttp2Session): void => {
    this.#sessions.add(s)
    if (this.#sweep === undefined) {
      this.#sweep = setInterval(this.#closeFinished, checkingIntervalMs(this.timeouts.headersTimeoutMs))
      this.#sweep.unref()
    }
    let open = 0
    let timer: NodeJS.Timeout | undefined
    // close() sends GOAWAY and, with no stream open, ends the connection.
    const arm = (ms: number) => {
      if (ms > 0) timer = setTimeout(() => s.close(), ms)
    }
    arm(this.timeouts.headersTimeoutMs)
    s.on('stream', (stream: http2.ServerHttp2Stream) => {
      clearTimeout(timer)
      open++
      stream.once('close', () => {
        if (--open === 0 && !s.closed) arm(this.timeouts.keepAliveTimeoutMs)
      })
      // A session opened while draining serves the stream that opened it, and no other.
      if (this.#draining) s.close()
    })
    s.once('close', () => {
      clearTimeout(timer)
      this.#sessions.delete(s)
      if (this.#sessions.size === 0) this.#sweep = void clearInterval(this.#sweep)
    })
  }

  /**
   * Destroys the sessions nghttp2 is done with but Node left open: after a GOAWAY for a
   * connection error (rapid reset, a malformed frame) nghttp2 stops reading, so the peer's
   * FIN goes unseen and the socket stays in CLOSE-WAIT, holding a place under maxConnections,
   * until the keep-alive timer. RFC 9113 (5.4.1) has the connection closed after that GOAWAY.
   */
  readonly #closeFinished = (): void => {
    for (const s of this.#sessions) if (!s.destroyed && nghttp2Finished(s)) s.destroy()
  }

  /** Wraps a request handler: a drain closes an HTTP/1.1 connection only between its answers. */
  track(next: Handler): Handler {
    return (req, res) => {
      if (req.httpVersionMajor === 1) this.#h1Request(req as http.IncomingMessage, res as unknown as http.ServerResponse)
      next(req, res)
    }
  }

  #h1Request(req: http.IncomingMessage, res: http.ServerResponse): void {
    const socket = req.socket as H1Socket
    if (socket[OPEN] === undefined) {
      this.#h1.add(socket)
      socket.once('close', () => this.#h1.delete(socket))
    }
    socket[OPEN] = (socket[OPEN] ?? 0) + 1
    if (this.#draining) res.shouldKeepAlive = false // Node then sends Connection: close and closes after it
    // One listener for every response ('close' comes once), not a closure made for each.
    res.on('close', this.#answered)
  }

  /** A response closed (Node calls it with the response as `this`, which keeps its request and so the socket). */
  readonly #answered = ((conns: FrontConnections) =>
    function (this: http.ServerResponse): void {
      conns.#closed(this.req.socket as H1Socket)
    })(this)

  #closed(socket: H1Socket): void {
    const left = socket[OPEN]
    if (left === undefined || !this.#h1.has(socket)) return
    socket[OPEN] = left - 1
    // A response begun before the drain promised keep-alive: end the connection now it is idle.
    if (left === 1 && this.#draining) socket.end()
  }

  get open(): number {
    return this.#sockets.size
  }

  beginDrain(): void {
    this.#draining = true
    for (const s of this.#sessions) s.close()
  }

  /** Closes HTTP/1.1 connections between requests and sessions with no stream open; drains the rest. */
  closeIdle(): void {
    this.beginDrain()
    for (const socket of this.#h1) if (socket[OPEN] === 0) socket.destroy()
  }

  destroyAll(): void {
    for (const s of this.#sessions) s.destroy()
    for (const socket of this.#sockets) socket.destroy()
  }
}
