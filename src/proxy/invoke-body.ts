// The invoke API routes on raw bytes: read until prefixLength bytes have arrived (or the
// body ended), route, then stream those bytes and the rest upstream, so a large body is
// never held whole in memory just to route it.
import { requestTooLarge } from '../core/errors.js'

export interface InvokeBody {
  prefix: Buffer
  /** The whole body, prefix first, for the upstream request. Single use. */
  body: AsyncIterable<Buffer>
  /** True when the body ended within the prefix (no more bytes to stream). */
  complete: boolean
}

export async function readInvokePrefix(req: AsyncIterable<Buffer>, prefixLength: number, maxBytes: number): Promise<InvokeBody> {
  const it = req[Symbol.asyncIterator]()
  const head: Buffer[] = []
  let size = 0
  let complete = false
  while (size < prefixLength) {
    const r = await it.next()
    if (r.done) {
      complete = true
      break
    }
    head.push(r.value)
    size += r.value.length
    if (size > maxBytes) throw requestTooLarge(maxBytes)
  }
  const first = Buffer.concat(head, size)
  async function* body(): AsyncGenerator<Buffer> {
    yield first
    if (complete) return
    let total = size
    for (;;) {
      const r = await it.next()
      if (r.done) return
      total += r.value.length
      if (total > maxBytes) throw requestTooLarge(maxBytes)
      yield r.value
    }
  }
  return { prefix: first.subarray(0, prefixLength), body: body(), complete }
}
