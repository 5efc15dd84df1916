// SGLang's disaggregation, as its router drives it: both legs at once, each body naming the
// prefill instance's bootstrap server and a room; the prefill pushes the prompt's KV cache to
// the decode instance that joined the same room. The prefill's own answer is read and dropped.
import { randomBytes } from 'node:crypto'
import { withFields } from './json-fields.js'

/** SGLang's --disaggregation-bootstrap-port default. */
export const DEFAULT_BOOTSTRAP_PORT = 8998

export interface Bootstrap {
  bootstrap_host: string
  bootstrap_port: number
  bootstrap_room: number
}

/** A room: a random integer below 2^53 (JSON numbers a Python int reads exactly; SGLang draws below 2^63). */
export function newRoom(): number {
  const b = randomBytes(8)
  return Number(b.readBigUInt64BE() & ((1n << 53n) - 1n))
}

/** The bootstrap fields for a prefill instance at `url` (its host) with `port` (its bootstrap port, default SGLang's). */
export function bootstrapFor(url: URL, port: number | undefined, room = newRoom()): Bootstrap {
  const host = url.hostname.startsWith('[') ? url.hostname.slice(1, -1) : url.hostname
  return { bootstrap_host: host, bootstrap_port: port ?? DEFAULT_BOOTSTRAP_PORT, bootstrap_room: room }
}

/** Either leg's body: the client's, with the bootstrap fields (the prefill leg's answer is not streamed). */
export function sglangBody(body: Buffer, b: Bootstrap, leg: 'prefill' | 'decode'): Buffer {
  return withFields(body, leg === 'prefill' ? { ...b, stream: false, stream_options: null } : { ...b })
}
