// A request body under two bounds: its size (413) and the time it may take to arrive (408).
// The chunks come through one async iterable, so the deadline holds both for bodies read
// whole and for invoke bodies streamed upstream as they arrive: there it surfaces as an
// error from the iterable, which fails the upstream request instead of leaving it waiting.
import { constants as h2 } from 'node:http2'
import type { Http2ServerRequest } from 'node:http2'
import { bodyTimeout, tooLarge } from './errors.js'
import type { Req } from './types.js'
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
 * answer says connection: close; on HTTP/2 the stream is reset with NO_ERROR once the
 * answer is out, which is how RFC 9113 (8.1) has a server stop a request it answered.
 * Memory stays bounded: past AHEAD_BYTES unread the request is paused until they are read.
 */
export function bodyChunks(req: Req, timeoutMs: number): AsyncIterable<Buffer> {
  return new BodyReader(req, timeoutMs)
}

// A large body is worked on a slice at a time, each followed by a turn of the event loop, so
// that other requests are served in between. Slices are sized to about a millisecond at the
// slowest on a busy 2-core machine: JsonShape reads small arrays at ~4 ms a MiB, and one
// socket can hand over 32 reads of 64 KiB in a single turn; copying into fresh memory costs
// 0.4-2 ms a MiB (page faults as much as the copy), and 16 MiB gathered at once held the
// event loop 25-70 ms.
export const SCAN_SLICE = 256 * 1024
export const GATHER_SLICE = 1024 * 1024

const nextTurn = () => new Promise<void>((resolve) => setImmediate(resolve))

/** Bytes worked on since the event loop last had a turn, and a turn given once they reach `slice`. */
class Pace {
  #used = 0
  constructor(readonly slice: number) {}

  /** Whether `length` more bytes fit in the current slice: then the caller works on them at once. */
  fits(length: number): boolean {
    if (this.#used + length > this.slice) return false
    this.#used += length
    return true
  }

  /** Runs fn over [0, length) in pieces, each within the current slice. */
  async run(length: number, fn: (from: number, to: number) => void): Promise<void> {
    for (let from = 0; from < length; ) {
      if (this.#used >= this.slice) {
        this.#used = 0
        await nextTurn()
      }
      const to = Math.min(length, from + this.slice - this.#used)
      fn(from, to)
      this.#used += to - from
      from = to
    }
  }
}

/** The whole body, each chunk shown to onChunk (which may throw to refuse it) as it arrives. */
export async function readBody(
  chunks: AsyncIterable<Buffer>,
  maxBytes: number,
  onChunk?: (chunk: Buffer) => void,
  alloc: (size: number) => Buffer = Buffer.allocUnsafe,
): Promise<Buffer> {
  const parts: Buffer[] = []
  let size = 0
  const scan = new Pace(SCAN_SLICE)
  for await (const chunk of chunks) {
    size += chunk.length
    if (size > maxBytes) throw tooLarge(maxBytes)
    // The usual body fits one slice: no promise or closure for it.
    if (onChunk && scan.fits(chunk.length)) onChunk(chunk)
    else if (onChunk) await scan.run(chunk.length, (from, to) => onChunk(to - from === chunk.length ? chunk : chunk.subarray(from, to)))
    parts.push(chunk)
  }
  const out = alloc(size)
  let at = 0
  if (size <= GATHER_SLICE) for (const p of parts) at += p.copy(out, at)
  else {
    const gather = new Pace(GATHER_SLICE)
    for (const p of parts) await gather.run(p.length, (from, to) => (at += p.copy(out, at, from, to)))
  }
  return out
}
