// Which leg of a disaggregated request a live worker is asked to play, from the request body:
// - kv_transfer_params (vLLM's NixlConnector): do_remote_decode is a prefill leg (compute, hold
//   the blocks, answer where to read them); do_remote_prefill a decode leg (read them from the
//   prefill's side channel), or a local prefill when the parameters are unusable, as in vLLM;
// - bootstrap_host / bootstrap_port / bootstrap_room (SGLang): both legs carry the same body, so
//   the worker's role tells them apart (a `both` worker plays prefill when the bootstrap server
//   named is its own).
// Every role serves whole requests: without these fields nothing changes.
import type { Role } from '../config/disaggregation.js'
import { BootstrapSource, roomHoldId, SGLANG_BOOTSTRAP_PORT, type BootstrapServer } from './bootstrap.js'
import type { SimEngine } from './engine.js'
import { readKvLeg, type RemotePrefill } from './kv-params.js'
import type { RemoteKvSource } from './kv-transfer.js'
import { ApiError } from './openai-shapes.js'
import { SideChannelSource, type SideChannelServer } from './side-channel.js'

export interface PdContext {
  role: Role
  /** This worker's KV side channel (remote_host/remote_port of its prefill answers). */
  sideChannel: SideChannelServer | null
  /** Its SGLang bootstrap server (prefill and both roles). */
  bootstrap: BootstrapServer | null
}

export type Leg =
  | { kind: 'whole' }
  /** vLLM prefill leg: hold the blocks (under the response's id), answer kv_transfer_params. */
  | { kind: 'nixl-prefill' }
  /** vLLM decode leg: read the KV from `remote`. */
  | { kind: 'nixl-decode'; remote: RemotePrefill }
  /** vLLM decode leg with parameters vLLM cannot use: prefilled locally, counted. */
  | { kind: 'nixl-invalid'; reason: string }
  /** SGLang prefill leg: compute one token, hold the blocks for the room, answer once they are read. */
  | { kind: 'sglang-prefill'; room: string }
  /** SGLang decode leg: register the room with the prefill's bootstrap server, wait for the KV. */
  | { kind: 'sglang-decode'; room: string; host: unknown; port: unknown }

const MAX_ROOM = 2n ** 63n - 1n

function bad(message: string, param: string): ApiError {
  return new ApiError(400, message, 'BadRequestError', param)
}

/**
 * bootstrap_room as its exact digits: rooms are random 63-bit integers, beyond what a JSON
 * number keeps exactly, so they are read from the raw body when the parsed number is not exact.
 */
function roomDigits(v: unknown, raw: string): string {
  if (typeof v !== 'number' || !Number.isInteger(v) || v < 0) {
    throw bad(`bootstrap_room must be an integer from 0 to 2^63-1; got ${JSON.stringify(v)}`, 'bootstrap_room')
  }
  let digits = String(v)
  if (!Number.isSafeInteger(v)) {
    const m = /(?<!\\)"bootstrap_room"\s*:\s*(\d+)/.exec(raw)
    if (m === null || Number(m[1]) !== v) throw bad('bootstrap_room must be an integer from 0 to 2^63-1', 'bootstrap_room')
    digits = m[1]!.replace(/^0+(?=\d)/, '')
  }
  if (BigInt(digits) > MAX_ROOM) throw bad(`bootstrap_room must be at most 2^63-1; got ${digits}`, 'bootstrap_room')
  return digits
}

function sameHost(a: string, b: string): boolean {
  const loop = (h: string): boolean => h === 'localhost' || h === '::1' || h.startsWith('127.')
  return a === b || (loop(a) && loop(b))
}

/** The leg this body asks of a worker with `pd`; 400 for malformed fields. */
export function readLeg(body: Record<string, unknown>, raw: string, pd: PdContext): Leg {
  const room = body.bootstrap_room
  if (room !== undefined && room !== null) {
    if (body.kv_transfer_params !== undefined && body.kv_transfer_params !== null) {
      throw bad('a request carries kv_transfer_params (vLLM) or bootstrap_room (SGLang), not both', 'kv_transfer_params')
    }
    const digits = roomDigits(room, raw)
    const host = body.bootstrap_host
    if (typeof host !== 'string' || host === '') throw bad('bootstrap_host must be a non-empty string with bootstrap_room', 'bootstrap_host')
    const port = body.bootstrap_port ?? SGLANG_BOOTSTRAP_PORT
    if (typeof port !== 'number' || !Number.isInteger(port) || port < 1 || port > 65535) {
      throw bad(`bootstrap_port must be an integer from 1 to 65535 or null; got ${JSON.stringify(body.bootstrap_port)}`, 'bootstrap_port')
    }
    const own = pd.bootstrap
    const prefill = pd.role === 'prefill' || (pd.role === 'both' && own !== null && own.port === port && sameHost(own.host, host))
    if (prefill) {
      if (own === null) throw new ApiError(503, 'This worker runs no bootstrap server (start it with --bootstrap-port).', 'ServiceUnavailableError')
      return { kind: 'sglang-prefill', room: digits }
    }
    return { kind: 'sglang-decode', room: digits, host, port }
  }
  let leg
  try {
    leg = readKvLeg(body.kv_transfer_params)
  } catch (err) {
    throw bad((err as Error).message, 'kv_transfer_params')
  }
  switch (leg.kind) {
    case 'none':
      return { kind: 'whole' }
    case 'prefill':
      return { kind: 'nixl-prefill' }
    case 'decode':
      return { kind: 'nixl-decode', remote: leg.remote }
    case 'invalid':
      return { kind: 'nixl-invalid', reason: leg.reason }
  }
}

/** The KV source of a decode leg, once the prompt's size is known; null for other legs. */
export function sourceFor(leg: Leg, engine: SimEngine, promptTokens: number): RemoteKvSource | null {
  if (leg.kind === 'nixl-decode') return new SideChannelSource(leg.remote, engine.clock, engine.config.kv.leaseMs / 6)
  if (leg.kind === 'sglang-decode') return new BootstrapSource(leg.host, leg.port, leg.room, promptTokens)
  return null
}

/** The hold id of a prefill leg answered as `responseId`. */
export function holdIdFor(leg: Leg, responseId: string): string | null {
  if (leg.kind === 'nixl-prefill') return responseId
  if (leg.kind === 'sglang-prefill') return roomHoldId(leg.room)
  return null
}
