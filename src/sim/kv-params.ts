// vLLM's kv_transfer_params, both directions: what a request asks for (read as vLLM's
// NixlConnector reads it) and what a prefill instance answers (shaped as vLLM's
// request_finished returns it). Live workers and the virtual fleet share both.
import type { KvHold } from './kv-holds.js'

/** The field as vLLM's answers carry it (NixlConnector, current vLLM: one block list per KV-cache group). */
export interface KvTransferParams {
  do_remote_prefill: boolean
  do_remote_decode: boolean
  remote_block_ids: number[][]
  remote_engine_id: string
  remote_request_id: string
  remote_host: string
  remote_port: number
  tp_size: number
  remote_num_tokens: number
  remote_blocks_expiry_time: null
}

/** Where a decode leg reads its KV: the prefill's side channel and the request there. */
export interface RemotePrefill {
  engineId: string
  requestId: string
  host: unknown
  port: unknown
  blockIds: unknown
}

/** What a request's kv_transfer_params ask of this instance. */
export type KvLeg =
  | { kind: 'none' }
  /** do_remote_decode: compute, then hold the blocks for a decode instance. */
  | { kind: 'prefill' }
  /** do_remote_prefill with usable parameters: read the KV from there. */
  | { kind: 'decode'; remote: RemotePrefill }
  /** do_remote_prefill without them: vLLM logs a warning and prefills locally. */
  | { kind: 'invalid'; reason: string }

const REMOTE_KEYS = ['remote_engine_id', 'remote_request_id', 'remote_host', 'remote_port'] as const

/**
 * Reads kv_transfer_params as vLLM's NixlConnector does (update_state_after_alloc): a decode
 * leg needs a non-empty remote_block_ids and all four remote_* keys present; without them it
 * is a local prefill. Values are taken as given: a host or port that does not answer is a
 * failed load later, as in vLLM. `undefined`/null: no field. Throws a TypeError for a
 * non-object (vLLM's request validation answers 400).
 */
export function readKvLeg(v: unknown): KvLeg {
  if (v === undefined || v === null) return { kind: 'none' }
  if (typeof v !== 'object' || Array.isArray(v)) throw new TypeError('kv_transfer_params must be an object')
  const p = v as Record<string, unknown>
  if (p.do_remote_decode === true) return { kind: 'prefill' }
  if (p.do_remote_prefill !== true) return { kind: 'none' }
  const blocks = p.remote_block_ids
  if (!Array.isArray(blocks) || blocks.length === 0) return { kind: 'invalid', reason: 'no remote_block_ids' }
  const missing = REMOTE_KEYS.filter((k) => !(k in p))
  if (missing.length > 0) return { kind: 'invalid', reason: `missing ${missing.join(', ')}` }
  return {
    kind: 'decode',
    remote: {
      engineId: String(p.remote_engine_id),
      requestId: String(p.remote_request_id),
      host: p.remote_host,
      port: p.remote_port,
      blockIds: blocks,
    },
  }
}

/** The prefill's answer field for a held request, as vLLM's request_finished builds it. */
export function prefillAnswer(engineId: string, hold: KvHold, host: string, port: number, tpSize: number): KvTransferParams {
  return {
    do_remote_prefill: true,
    do_remote_decode: false,
    remote_block_ids: [hold.blockIds.slice()],
    remote_engine_id: engineId,
    remote_request_id: hold.id,
    remote_host: host,
    remote_port: port,
    tp_size: tpSize,
    remote_num_tokens: hold.tokens,
    remote_blocks_expiry_time: null,
  }
}
