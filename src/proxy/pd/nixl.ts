// vLLM's NixlConnector, as a router drives it over HTTP: the prefill leg asks the prefill
// instance to compute the prompt and keep its KV blocks for a remote decode; its answer's
// kv_transfer_params tell the decode instance where to read them.
import type { OpenAIApi } from '../../core/key/openai-key.js'
import { withFields } from './json-fields.js'

/** What the prefill leg sends: a remote decode is to follow, and nothing is known of it yet. */
export const PREFILL_PARAMS = Object.freeze({
  do_remote_decode: true,
  do_remote_prefill: false,
  remote_engine_id: null,
  remote_block_ids: null,
  remote_host: null,
  remote_port: null,
})

/**
 * The prefill leg's body: the client's, asking for one token, not streamed. vLLM hands the
 * blocks over only for a request that finished normally (older versions: length-capped only),
 * so the one token must not be able to end the sequence: `min_tokens: 1` masks the end-of-
 * sequence and stop tokens while fewer than one token is out, and stop strings are not checked
 * until more than min_tokens are (vLLM's check_stop and detokenizer). The client's own
 * min_tokens would exceed max_tokens and be refused; ours replaces it. The responses API has
 * neither field: its one token is capped by max_output_tokens.
 */
export function nixlPrefillBody(body: Buffer, api: OpenAIApi | 'responses'): Buffer {
  if (api === 'responses') return withFields(body, { stream: false, kv_transfer_params: PREFILL_PARAMS, max_output_tokens: 1 })
  const common = { stream: false, stream_options: null, kv_transfer_params: PREFILL_PARAMS }
  if (api === 'chat') return withFields(body, { ...common, max_tokens: 1, max_completion_tokens: 1, min_tokens: 1 })
  return withFields(body, { ...common, max_tokens: 1, min_tokens: 1 })
}

/** The decode leg's body: the client's own, with the prefill's parameters. */
export function nixlDecodeBody(body: Buffer, params: NixlParams): Buffer {
  return withFields(body, { kv_transfer_params: params })
}

/** kv_transfer_params as the prefill instance returns them, checked. */
export interface NixlParams {
  do_remote_prefill: true
  do_remote_decode: false
  remote_engine_id: string
  remote_block_ids: unknown[]
  remote_host: string
  remote_port: number
  remote_request_id?: string
  [more: string]: unknown
}

/** Why a prefill answer's parameters cannot go to a decode instance (the metric's reason label). */
export type ParamsProblem = 'missing_params' | 'malformed_params'

export type ParamsCheck = { ok: true; params: NixlParams } | { ok: false; reason: ParamsProblem; detail: string }

const isBlockId = (x: unknown) => typeof x === 'number' && Number.isInteger(x) && x >= 0

/**
 * Checks what vLLM's decode side needs: without any of these it prefills the whole prompt
 * itself and says so only in its own log, so a bad answer must be caught here. Block ids are a
 * flat list (older vLLM) or one list per KV-cache group; remote_request_id is newer vLLM's and
 * checked when present.
 */
export function checkNixlParams(answer: unknown): ParamsCheck {
  const p = (answer as { kv_transfer_params?: unknown } | null)?.kv_transfer_params
  if (p === undefined || p === null) return { ok: false, reason: 'missing_params', detail: 'the answer has no kv_transfer_params (is the instance started with a KV connector, --kv-transfer-config?)' }
  if (typeof p !== 'object' || Array.isArray(p)) return { ok: false, reason: 'malformed_params', detail: 'kv_transfer_params is not an object' }
  const o = p as Record<string, unknown>
  const bad = (field: string, want: string): ParamsCheck => ({ ok: false, reason: 'malformed_params', detail: `kv_transfer_params.${field} ${want}; got ${JSON.stringify(o[field] ?? null).slice(0, 80)}` })
  if (o.do_remote_prefill !== true) return bad('do_remote_prefill', 'must be true')
  if (typeof o.remote_engine_id !== 'string' || o.remote_engine_id === '') return bad('remote_engine_id', 'must be a non-empty string')
  if (typeof o.remote_host !== 'string' || o.remote_host === '') return bad('remote_host', 'must be a non-empty string')
  if (typeof o.remote_port !== 'number' || !Number.isInteger(o.remote_port) || o.remote_port < 1 || o.remote_port > 65535) return bad('remote_port', 'must be a port number')
  const ids = o.remote_block_ids
  const flat = Array.isArray(ids) && ids.every(isBlockId)
  const grouped = Array.isArray(ids) && ids.length > 0 && ids.every((g) => Array.isArray(g) && g.every(isBlockId))
  if (!flat && !grouped) return bad('remote_block_ids', 'must be a list of block ids (or one list per KV-cache group)')
  if (o.remote_request_id !== undefined && o.remote_request_id !== null && typeof o.remote_request_id !== 'string') return bad('remote_request_id', 'must be a string')
  return { ok: true, params: { ...o, do_remote_decode: false } as NixlParams }
}
