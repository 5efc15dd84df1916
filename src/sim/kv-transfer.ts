// Moving a prompt's KV cache from a prefill instance to a decode instance, as vLLM's
// NixlConnector (and SGLang's bootstrap flow) do it, reduced to what the engine needs:
// - how long a transfer takes: latency + tokens x bytes per token / link bandwidth;
// - what a prefill instance does with its blocks after a prefill leg (holds them, under a
//   lease) and what a decode instance does when it cannot get them (kv_load_failure_policy);
// - RemoteKvSource, the one interface through which a decode-leg sequence reaches the
//   prefill side: live workers implement it over a loopback socket (side-channel.ts,
//   bootstrap.ts), the virtual fleet over the prefill engine's holds directly.

/** vLLM's kv_load_failure_policy: `fail` ends the request with an error, `recompute` prefills it locally. */
export const KV_LOAD_FAILURE_POLICIES = ['fail', 'recompute'] as const
export type KvLoadFailurePolicy = (typeof KV_LOAD_FAILURE_POLICIES)[number]

export interface KvTransferConfig {
  /** Bytes of KV cache per token (all layers, K and V), as the model stores it. */
  bytesPerToken: number
  /** Link bandwidth between a prefill and a decode instance, bytes per second, as a transfer reaches it. */
  linkBytesPerSec: number
  /** Fixed cost per transfer (posting the read, the completion notification), ms. */
  latencyMs: number
  /** How long a prefill instance holds blocks nobody has asked for (vLLM's kv_lease_duration), ms. */
  leaseMs: number
  loadFailurePolicy: KvLoadFailurePolicy
  /** SGLang: how long a bootstrap room waits for its other leg (SGLANG_DISAGGREGATION_BOOTSTRAP_TIMEOUT), ms. */
  bootstrapTimeoutMs: number
  /** Tensor-parallel size reported in kv_transfer_params (tp_size). */
  tpSize: number
}

/** vLLM's initial lease on held blocks (kv_connector_extra_config kv_lease_duration: 30 s). */
export const DEFAULT_KV_LEASE_MS = 30_000
/** SGLang's SGLANG_DISAGGREGATION_BOOTSTRAP_TIMEOUT and _WAITING_TIMEOUT (300 s). */
export const DEFAULT_BOOTSTRAP_TIMEOUT_MS = 300_000

/** Simulated ms to move `tokens` tokens of KV. */
export function transferMs(kv: KvTransferConfig, tokens: number): number {
  return kv.latencyMs + (tokens * kv.bytesPerToken * 1000) / kv.linkBytesPerSec
}

/** How a prefill leg's hold ended: read by the decode, expired, given up by the decode, or lost with the process. */
export type HoldEnd = 'read' | 'expired' | 'cancelled' | 'restart'

/** A prefill leg's held blocks (kv-holds.ts keeps them). */
export interface KvHold {
  readonly id: string
  /** The blocks held (vLLM's remote_block_ids, one KV-cache group). */
  readonly blockIds: readonly number[]
  /** Prompt tokens whose KV is held (remote_num_tokens). */
  readonly tokens: number
  readonly heldAt: number
  state: 'held' | 'reading'
  /** Simulated ms the lease ends; Infinity while a decode keeps it alive or reads it. */
  expiresAt: number
}

/** Why a prefill instance refuses a read; the decode applies its load-failure policy. */
export type PullRefusal = string

/**
 * How a decode-leg sequence reaches the KV its prefill leg computed. The engine calls, in order:
 * attach() when the request enters it; begin() once its blocks are allocated; then finish()
 * after the transfer time, or cancel() if the sequence leaves first (before begin() or during
 * the transfer; vLLM then tells the prefill side to free the blocks). begin() is called at most
 * once, and at most one of finish() and cancel(); after a refusal nothing more is called (the
 * source ends itself: heartbeats stop, sockets close).
 */
export interface RemoteKvSource {
  /** The request reached the engine: register interest (vLLM's heartbeats start; SGLang registers the room). */
  attach(): void
  /**
   * Ask the prefill side to be read for `tokens` tokens (the prompt tokens this engine lacks).
   * `ready(null)` once it agreed (the engine then spends the transfer time), or `ready(reason)`
   * if it refused or cannot be reached. May call back synchronously.
   */
  begin(tokens: number, ready: (refusal: PullRefusal | null) => void): void
  /** The transfer time has passed: the prefill side frees its blocks (vLLM's read notification). */
  finish(): void
  /** The sequence left before its KV arrived (abort, restart): the prefill side may free its blocks. */
  cancel(): void
}
