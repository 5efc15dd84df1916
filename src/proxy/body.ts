// A request body under two bounds: its size (413) and the time it may take to arrive (408).
// The chunks come through one async iterable, so the deadline holds both for bodies read
// whole and for invoke bodies streamed upstream as they arrive: there it surfaces as an
// error from the iterable, which fails the upstream request instead of leaving it waiting.
import { constants as h2 } from 'node:http2'
import type { Http2ServerRequest } from 'node:http2'
import { bodyTimeout, tooLarge } from '../request/errors.js'
import type { Req, Res } from './types.js'
import { PrefixRouterError } from '../core/errors.js'

const clientGone = () => new PrefixRouterError('PR_CLIENT_GONE', 'client closed the request body')

/** Bytes a reader may hold unread before the request is paused: a body this small is never paused. */
const AHEAD_BYTES = 64 * 1024

const DONE: IteratorResult<Buffer> = Object.freeze({ value: undefined, done: true })
const READER = Symbol('body reader')
type Read = Req & { [READER]?: Listener | undefined }

// Listeners shared by every request (Node calls them with the request as `this`), so that a
// body read makes no closure.
function onData(this: Read, chunk: Buffer): void {
  this[READER]?.data(chunk)
}
function onEnd(this: Read): void {
  this[READER]?.end()
}
function onError(this: Read, err: Error): void {
  this[READER]?.fail(err)
}
// 'close' follows 'end' on every request (and the reader is detached by then); only an early one means the client left.
function onClose(this: Read): void {
  this[READER]?.fail(clientGone())
}
function onTimeout(r: Listener, ms: number): void {
  r.fail(bodyTimeout(ms))
}

/** A request's body events and its deadline: what becomes of the chunks is the subclass's. */
abstract class Listener {
  readonly #timer: NodeJS.Timeout | undefined

  constructor(
    readonly req: Read,
    timeoutMs: number,
  ) {
    this.#timer = timeoutMs > 0 ? setTimeout(onTimeout, timeoutMs, this, timeoutMs) : undefined
    this.#timer?.unref()
    req[READER] = this
    req.on('data', onData)
    req.on('end', onEnd)
    req.on('error', onError)
    req.on('close', onClose)
  }

  abstract data(chunk: Buffer): void
  abstract end(): void
  abstract fail(err: Error): void

  protected detach(): void {
    clearTimeout(this.#timer)
    const { req } = this
    req.off('data', onData)
    req.off('end', onEnd)
    req.off('error', onError)
    req.off('close', onClose)
    req[READER] = undefined
  }

  /** Stops listening to a body that will not be read to its end. */
  protected abandon(): void {
    this.detach()
    const { req } = this
    req.pause()
    if (req.httpVersionMajor === 2) {
      const stream = (req as Http2ServerRequest).stream
      const reset = () => {
        if (!stream.closed && !stream.destroyed) stream.close(h2.NGHTTP2_NO_ERROR)
      }
      if (stream.writableFinished) reset()
      else stream.once('finish', reset)
    }
  }
}

/**
 * Whether an answer that closes the connection should wait for the rest of req's body: an
 * HTTP/1.1 body not yet read to its end, and not declared longer than maxBytes (which
 * endAfterBody would give up on anyway). HTTP/2 resets the stream instead (abandon).
 */
export function bodyLeft(req: Req, maxBytes: number): boolean {
  if (req.httpVersionMajor !== 1 || req.complete) return false
  return !(Number(req.headers['content-length']) > maxBytes)
}

/**
 * Sends `body`, the rest of an answer whose headers are written (with content-length) and which
 * closes the connection, and ends it once the rest of req's body has been read and thrown
 * away: at most maxBytes more of it, within timeoutMs (0: no limit). A socket closed with
 * bytes unread is reset, which loses the answer for a client still sending, or one that
 * reads only once it has sent everything. Node reads the rest this way after an answer that
 * keeps the connection, but without a bound.
 */
export function endAfterBody(req: Req, res: Res, body: string, maxBytes: number, timeoutMs: number): void {
  res.write(body)
  let left = maxBytes
  const end = () => {
    clearTimeout(timer)
    req.off('data', onData)
    req.off('end', end)
    req.off('close', end)
    res.end()
  }
  const onData = (chunk: Buffer) => {
    if ((left -= chunk.length) < 0) end()
  }
  const timer = timeoutMs > 0 ? setTimeout(end, timeoutMs).unref() : undefined
  req.on('data', onData)
  req.once('end', end)
  req.once('close', end)
  req.resume()
}

/** The chunks of one request's body, as an async iterator: see bodyChunks. */
class BodyReader extends Listener implements AsyncIterator<Buffer>, AsyncIterable<Buffer> {
  readonly #queue: Buffer[] = []
  #queued = 0
  #ended = false
  #paused = false
  #failure: Error | undefined = undefined
  #waiting: { resolve(r: IteratorResult<Buffer>): void; reject(err: Error): void } | undefined = undefined

  data(chunk: Buffer): void {
    const w = this.#waiting
    if (w !== undefined) {
      this.#waiting = undefined
      return w.resolve({ value: chunk, done: false })
    }
    this.#queue.push(chunk)
    this.#queued += chunk.length
    // Enough held: the reader is either buffering or writing upstream, and takes more when it wants them.
    if (this.#queued >= AHEAD_BYTES && !this.#paused) {
      this.#paused = true
      this.req.pause()
    }
  }

  end(): void {
    this.#ended = true
    this.detach()
    const w = this.#waiting
    this.#waiting = undefined
    w?.resolve(DONE)
  }

  fail(err: Error): void {
    if (this.#ended || this.#failure) return
    this.#failure = err
    this.abandon()
    const w = this.#waiting
    this.#waiting = undefined
    w?.reject(err)
  }

  next(): Promise<IteratorResult<Buffer>> {
    const q = this.#queue
    if (q.length > 0) {
      const value = q.shift()!
      this.#queued -= value.length
      return Promise.resolve({ value, done: false })
    }
    if (this.#failure) return Promise.reject(this.#failure)
    if (this.#ended) return Promise.resolve(DONE)
    if (this.#paused) {
      this.#paused = false
      this.req.resume()
    }
    return new Promise((resolve, reject) => (this.#waiting = { resolve, reject }))
  }

  [Symbol.asyncIterator](): AsyncIterator<Buffer> {
    return this
  }

  async return(): Promise<IteratorResult<Buffer>> {
    if (!this.#ended && !this.#failure) {
      this.#failure = clientGone()
      this.abandon()
    }
    return DONE
  }
}

/** What a small body read whole is for: given it inside the request's 'end' event, it gives the promise's value. */
export interface WholeUse<T> {
  whole(body: Buffer): T | PromiseLike<T>
}

const AS_IS: WholeUse<Buffer> = { whole: (body) => body }

/** A small body gathered whole as it arrives, for one promise: see readWhole. */
class WholeBody extends Listener {
  // The first chunk on its own: most bodies come in one, and need no array.
  #first: Buffer | undefined = undefined
  #rest: Buffer[] | undefined = undefined
  #size = 0
  #settled = false
  resolve: (value: unknown) => void = noop
  reject: (err: Error) => void = noop

  constructor(
    req: Read,
    timeoutMs: number,
    readonly maxBytes: number,
    readonly use: WholeUse<unknown>,
  ) {
    super(req, timeoutMs)
  }

  data(chunk: Buffer): void {
    this.#size += chunk.length
    if (this.#size > this.maxBytes) return this.fail(tooLarge(this.maxBytes))
    if (this.#first === undefined) this.#first = chunk
    else (this.#rest ??= [this.#first]).push(chunk)
  }

  end(): void {
    this.#settled = true
    // A body that came in one chunk is that chunk: HTTP/1 and HTTP/2 both hand over each chunk in a buffer of its own.
    const rest = this.#rest
    const body = rest !== undefined ? Buffer.concat(rest, this.#size) : (this.#first ?? Buffer.alloc(0))
    // Used here, in the 'end' event, rather than when a promise callback gets the body: that
    // comes only after Node has finished with the stream, and a proxied request is sent
    // upstream from here. Settled first, so nothing the use does can fail the read.
    try {
      this.resolve(this.use.whole(body))
    } catch (err) {
      this.reject(err as Error)
    } finally {
      this.detach()
    }
  }

  fail(err: Error): void {
    if (this.#settled) return
    this.#settled = true
    this.abandon()
    this.reject(err)
  }
}

const noop = () => {}

/**
 * The whole of req's body, which must be small (it is not paced, and never paused), under
 * the same bounds and with the same failures as bodyChunks and readBody: 413 past maxBytes,
 * 408 once timeoutMs have passed. Read through listeners into one promise rather than
 * through an async iterator, whose every chunk costs promises and result objects. With `use`,
 * the promise gives what use.whole makes of the body (a throw rejects it), called as the body
 * ends.
 */
export function readWhole(req: Req, timeoutMs: number, maxBytes: number): Promise<Buffer>
export function readWhole<T>(req: Req, timeoutMs: number, maxBytes: number, use: WholeUse<T>): Promise<T>
export function readWhole(req: Req, timeoutMs: number, maxBytes: number, use: WholeUse<unknown> = AS_IS): Promise<unknown> {
  reading = new WholeBody(req, timeoutMs, maxBytes, use)
  return new Promise(settles)
}

// The promise's executor, which runs at once, is handed the reader here rather than by a
// closure made for every body.
let reading: WholeBody | undefined
function settles(resolve: (value: unknown) => void, reject: (err: Error) => void): void {
  reading!.resolve = resolve
  reading!.reject = reject
  reading = undefined
}

/**
 * The chunks of req's body, failing with 408 once timeoutMs (0: no limit) have passed since
 * this call. Single use. A reader that gives up early leaves the rest unread, and the
 * answer says connection: close (and is ended once the rest is read: endAfterBody); on HTTP/2 the stream is reset with NO_ERROR once the
 * answer is out, which is how RFC 9113 (8.1) has a server stop a request it answered.
 * Memory stays bounded: past AHEAD_BYTES unread the request is paused until they are read.
 */
export function bodyChunks(req: Req, timeoutMs: number): AsyncIterable<Buffer> {
  return new BodyReader(req, timeoutMs)
}
