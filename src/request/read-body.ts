// A body read whole under its size bound (413), a slice at a time: what serve's chunked reads
// and the admin port's dry run share, below the fronts.
import { tooLarge } from './errors.js'

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
