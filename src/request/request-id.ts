// The request id: the client's X-Request-Id when it is usable, else one of our own. It goes
// upstream (vLLM takes it as its request id and logs it), back on every answer, and into the
// access log, so one id finds a request in the client's, the router's and the instance's logs.
import { randomFillSync } from 'node:crypto'

export const REQUEST_ID_HEADER = 'x-request-id'
// Printable ASCII only: it is copied into headers and log lines verbatim.
const VALID = /^[\x20-\x7e]{1,200}$/

export interface RequestId {
  id: string
  /** The client sent one that was unusable (repeated, empty, too long, not printable ASCII). */
  replaced: boolean
}

// Random bytes are drawn from the CSPRNG a batch at a time, as crypto.randomUUID draws them.
const BATCH = 128
const random = Buffer.alloc(16 * BATCH)
let drawn = BATCH
const HEX = Buffer.from('0123456789abcdef', 'latin1')
const text = Buffer.alloc(36)

/**
 * A random (version 4) UUID, as crypto.randomUUID makes one, but spelled into a scratch buffer
 * and read out as one string: randomUUID joins it from 20 pieces, about 600 bytes of
 * intermediate strings for every request that comes without an id.
 */
export function uuid(): string {
  if (drawn === BATCH) {
    randomFillSync(random)
    drawn = 0
  }
  const at = 16 * drawn++
  random[at + 6] = (random[at + 6]! & 0x0f) | 0x40
  random[at + 8] = (random[at + 8]! & 0x3f) | 0x80
  let j = 0
  for (let i = 0; i < 16; i++) {
    if (i === 4 || i === 6 || i === 8 || i === 10) text[j++] = 0x2d
    const b = random[at + i]!
    text[j++] = HEX[b >> 4]!
    text[j++] = HEX[b & 15]!
  }
  return text.toString('latin1', 0, 36)
}

/**
 * A random UUID when the client sent none: ids unique across router replicas and restarts
 * without any coordination, in the shape vLLM makes its own.
 */
export function requestIdOf(header: string | string[] | undefined): RequestId {
  if (typeof header === 'string' && VALID.test(header)) return { id: header, replaced: false }
  return { id: uuid(), replaced: header !== undefined }
}
