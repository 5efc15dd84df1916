// Log lines written in batches to a file descriptor by libuv's thread pool, and what happens
// when nobody reads them any more. pino.destination (sonic-boom 4, what pino 10 ships) retries
// a failed synchronous write forever, EPIPE included: a router whose stdout was a closed pipe
// (`serve | head -3`, a log shipper that died) hung in the flush at exit, deaf to signals. Here
// a write that fails for any reason but a full pipe ends logging to that destination, once,
// said on stderr; the router keeps serving and drains as usual. A full pipe (EAGAIN: Node
// makes a piped stdout non-blocking) is retried every LOG_FLUSH_MS, holding at most
// MAX_PENDING_BYTES; lines beyond are dropped, and stderr says so and how many.
import fs from 'node:fs'

/** Bytes of log lines gathered before a write, and the longest a line waits for them. */
export const LOG_BATCH_BYTES = 4096
export const LOG_FLUSH_MS = 100
/** Lines a reader has not taken (a full pipe) are kept up to this many bytes; later ones are dropped, counted. */
export const MAX_PENDING_BYTES = 16 << 20
/** The flush at exit waits at most this long for a full pipe to take the last lines. */
export const EXIT_FLUSH_MS = 1000

/** The reader is slow, not gone: the write may be tried again. */
function full(err: NodeJS.ErrnoException): boolean {
  return err.code === 'EAGAIN' || err.code === 'EWOULDBLOCK' || err.code === 'EBUSY'
}

const pause = new Int32Array(new SharedArrayBuffer(4))

export class BatchedLog {
  readonly #fd: number
  readonly #name: string
  #lines: Buffer[] = []
  #bytes = 0
  /** A batch is with the thread pool. */
  #writing = false
  #waiters: (() => void)[] = []
  /** Why lines are no longer written (undefined: they are). */
  failed: NodeJS.ErrnoException | undefined
  /** Lines dropped because MAX_PENDING_BYTES were waiting for the reader, since it last took some. */
  dropped = 0

  /** `dest`: a file descriptor (not closed by this) or a path, opened for appending. */
  constructor(dest: number | string) {
    this.#fd = typeof dest === 'number' ? dest : fs.openSync(dest, 'a')
    this.#name = dest === 1 ? 'stdout' : dest === 2 ? 'stderr' : typeof dest === 'string' ? dest : `file descriptor ${dest}`
    setInterval(() => this.#flush(), LOG_FLUSH_MS).unref()
    // What is left is written when the process exits (a crash included; not a SIGKILL).
    process.on('exit', () => this.flushSync())
  }

  /** pino's own lines come as strings; the access log's as bytes (log-line.ts), kept as they are. */
  write(line: string | Buffer): void {
    if (this.failed !== undefined) return
    if (typeof line === 'string') line = Buffer.from(line)
    if (this.#bytes + line.length > MAX_PENDING_BYTES) {
      if (this.dropped++ === 0) this.#say(`${this.#name} takes no more log lines (${MAX_PENDING_BYTES >> 20} MiB wait to be read); further lines are dropped until it does`)
      return
    }
    this.#lines.push(line)
    this.#bytes += line.length
    if (this.#bytes >= LOG_BATCH_BYTES) this.#flush()
  }

  /** Writes what is waiting; `cb` when it is written (or cannot be). */
  flush(cb?: () => void): void {
    if (cb !== undefined) this.#waiters.push(cb)
    this.#flush()
    this.#settle()
  }

  /**
   * Writes what is waiting before returning: at exit, when no callback would run. A batch with
   * the thread pool is left to it (written again it could appear twice).
   */
  flushSync(): void {
    if (this.failed !== undefined || this.#bytes === 0) return
    let batch = this.#take()
    const giveUp = Date.now() + EXIT_FLUSH_MS
    while (batch.length > 0) {
      try {
        batch = batch.subarray(fs.writeSync(this.#fd, batch))
      } catch (err) {
        const e = err as NodeJS.ErrnoException
        if (!full(e) || Date.now() > giveUp) return this.#fail(e)
        Atomics.wait(pause, 0, 0, 10)
      }
    }
  }

  #take(): Buffer {
    const batch = this.#lines.length === 1 ? this.#lines[0]! : Buffer.concat(this.#lines, this.#bytes)
    this.#lines = []
    this.#bytes = 0
    return batch
  }

  #flush(): void {
    if (this.#writing || this.#bytes === 0 || this.failed !== undefined) return
    const batch = this.#take()
    this.#writing = true
    fs.write(this.#fd, batch, (err, n) => {
      this.#writing = false
      if (err !== null && !full(err)) this.#fail(err)
      else {
        const rest = err !== null ? batch : batch.subarray(n)
        if (rest.length > 0) {
          // First in line again, ahead of what came meanwhile; a full pipe is tried again by the interval.
          this.#lines.unshift(rest)
          this.#bytes += rest.length
        }
        if (err === null && this.dropped > 0) {
          this.#say(`${this.#name} takes log lines again; ${this.dropped} were dropped while it did not`)
          this.dropped = 0
        }
        if (err === null && (this.#bytes >= LOG_BATCH_BYTES || (this.#waiters.length > 0 && this.#bytes > 0))) this.#flush()
      }
      this.#settle()
    })
  }

  #settle(): void {
    if (this.#waiters.length === 0 || this.#writing || (this.#bytes > 0 && this.failed === undefined)) return
    const waiters = this.#waiters
    this.#waiters = []
    for (const w of waiters) w()
  }

  #fail(err: NodeJS.ErrnoException): void {
    this.failed = err
    this.#lines = []
    this.#bytes = 0
    const why = err.code === 'EPIPE' ? 'EPIPE: its reader is gone' : (err.code ?? err.message)
    this.#say(`log lines are no longer written to ${this.#name} (${why}); the router goes on without them`)
  }

  #say(what: string): void {
    if (this.#fd === 2) return
    // Straight to the descriptor: process.stderr would raise an EPIPE of its own if stderr is gone too.
    try {
      fs.writeSync(2, `prefix-router: ${what}\n`)
    } catch {
      // stderr is gone as well (or full): nobody is left to tell.
    }
  }
}
