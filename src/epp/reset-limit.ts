// Node's HTTP/2 (nghttp2's rapid-reset mitigation, CVE-2023-44487) ends a connection with
// GOAWAY INTERNAL_ERROR once its peer has reset more streams than a bucket of 1,000 refilled by
// 33 a second allows, failing every stream open on it. A gateway resets ext_proc streams as a
// matter of course (Envoy resets every stream it has not seen closed when its request ends), so
// a busy gateway would lose its connection to the picker every few seconds. Node 20 has no
// option to change the limit; nghttp2 stops applying it once the server has submitted a GOAWAY
// of its own. So each connection's resets are counted here with the same bucket, and when half
// of it is spent the picker sends a graceful GOAWAY (NO_ERROR, every stream id still accepted):
// the gateway opens a new connection for new streams while those open on the old one finish.
import http2 from 'node:http2'
import { PrefixRouterError } from '../core/errors.js'

/** nghttp2's defaults (NGHTTP2_DEFAULT_STREAM_RESET_BURST / _RATE), fixed in Node 20. */
export const RESET_BURST = 1_000
export const RESET_RATE = 33

/** The highest stream id: a GOAWAY naming it refuses no stream the client may already have sent. */
const EVERY_STREAM = 2 ** 31 - 1

/** Whole seconds of the monotonic clock, as nghttp2 reads it (libuv's hrtime is CLOCK_MONOTONIC too). */
const nowSeconds = (): number => Number(process.hrtime.bigint() / 1_000_000_000n)

/** nghttp2_ratelim as nghttp2 keeps it: refilled by `rate` for each whole second passed, up to `burst`. */
export class ResetBucket {
  #tokens: number
  #at: number

  constructor(
    readonly burst = RESET_BURST,
    readonly rate = RESET_RATE,
    now = nowSeconds(),
  ) {
    this.#tokens = burst
    this.#at = now
  }

  /** One reset taken at `now` (seconds); the tokens left. */
  take(now = nowSeconds()): number {
    if (now !== this.#at) {
      this.#tokens = Math.min(this.burst, this.#tokens + this.rate * (now > this.#at ? now - this.#at : 1))
      this.#at = now
    }
    if (this.#tokens > 0) this.#tokens--
    return this.#tokens
  }
}

/**
 * Whether the peer reset the stream: it closed before the picker's end of it (trailers, or a
 * trailers-only answer) was sent, or with an error code. A reset that comes after both sides
 * ended finds no stream, and nghttp2 does not count it either.
 */
function resetByPeer(stream: http2.ServerHttp2Stream): boolean {
  if (stream.rstCode !== undefined && stream.rstCode !== http2.constants.NGHTTP2_NO_ERROR) return true
  return stream.sentTrailers === undefined && stream.sentHeaders?.['grpc-status'] === undefined
}

export interface ResetLimitOptions {
  /** Send the GOAWAY when this many tokens are left (default half the burst: a read can carry hundreds of resets, counted before JavaScript sees one). */
  reserve?: number
  /** Called once per connection asked to go away, with the resets counted on it. */
  onGoaway?: (info: { resets: number; remote: string | undefined }) => void
}

/** Counts the peer's resets on every connection `server` takes and sends the graceful GOAWAY before the limit. */
export function limitResets(server: http2.Http2Server | http2.Http2SecureServer, opts: ResetLimitOptions = {}): void {
  const reserve = opts.reserve ?? RESET_BURST / 2
  server.on('session', (session: http2.ServerHttp2Session) => {
    const bucket = new ResetBucket()
    let resets = 0
    let leaving = false
    session.on('stream', (stream: http2.ServerHttp2Stream) => {
      stream.once('close', () => {
        if (leaving || session.closed || session.destroyed || !resetByPeer(stream)) return
        resets++
        if (bucket.take() > reserve) return
        leaving = true
        goAway(session)
        opts.onGoaway?.({ resets, remote: session.socket?.remoteAddress })
      })
    })
  })
}

/**
 * GOAWAY NO_ERROR naming every stream id, so that none the gateway has sent is refused; after a
 * PING's round trip (the gateway has read the GOAWAY by then and opens no stream more here) the
 * session closes as Node closes one: a last GOAWAY, then the socket once the open streams end.
 */
function goAway(session: http2.ServerHttp2Session): void {
  try {
    session.goaway(http2.constants.NGHTTP2_NO_ERROR, EVERY_STREAM)
  } catch {
    return // already closing
  }
  const close = () => {
    if (!session.closed && !session.destroyed) session.close()
  }
  if (!session.ping(close)) close()
}

/** The HTTP/2 servers a grpc-js Server has bound (kept in a private map: grpc-js offers no hook on its sessions). */
export function http2ServersOf(server: object): (http2.Http2Server | http2.Http2SecureServer)[] {
  const map = (server as { http2Servers?: unknown }).http2Servers
  if (!(map instanceof Map)) throw new PrefixRouterError('EPP_GRPC_INTERNALS', 'grpc-js keeps its HTTP/2 servers elsewhere than Server.http2Servers: the stream-reset limit cannot be watched')
  return [...map.keys()] as (http2.Http2Server | http2.Http2SecureServer)[]
}
