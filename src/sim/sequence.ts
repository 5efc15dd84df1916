// One request inside an engine: its prompt (as token count and block hashes), its
// progress and the blocks it pins. Times are simulated milliseconds.
import type { TimerHandle } from './clock.js'
import type { HoldEnd, KvHold, RemoteKvSource } from './kv-transfer.js'

/** `error`: vLLM's FinishReason.ERROR (a KV load failure under policy `fail`), answered 500. */
export type FinishReason = 'stop' | 'length' | 'abort' | 'error'
/** `remote`: blocks allocated, waiting for its KV from a prefill instance (vLLM's WAITING_FOR_REMOTE_KVS). */
export type SeqState = 'pending' | 'waiting' | 'remote' | 'running' | 'finished'

export interface SeqListener {
  /** Tokens were generated (one per step; the first one at the end of prefill). */
  onTokens?(seq: Sequence, count: number, at: number): void
  /** The sequence finished (`seq.finishReason`), including by abort. */
  onFinish?(seq: Sequence, at: number): void
  /** A prefill leg's held blocks were freed: read by the decode side, expired, given up, or lost. */
  onKvReleased?(seq: Sequence, how: HoldEnd, at: number): void
}

export interface EngineRequest {
  promptTokens: number
  /** Keys of the prompt's full blocks (see block-hash.ts preparePrompt). */
  blockKeys: Float64Array
  /** Tokens to generate; the sequence then finishes with `finishReason`. */
  maxTokens: number
  finishReason?: 'stop' | 'length'
  /** Extra simulated delay before the request reaches the scheduler (the latency fault). */
  extraDelayMs?: number
  /** The prompt's token ids (PreparedPrompt.tokenIds): needed only by an engine publishing KV events. */
  tokenIds?: Uint32Array
  /** The LoRA adapter the request is for (undefined: the base model), for KV events. */
  loraName?: string
  /** The request's cache_salt, for KV events (its block keys already include it). */
  cacheSalt?: string
  /** Free-form tag carried to the listener (the HTTP layer and the virtual fleet use it). */
  tag?: unknown
  /**
   * A prefill leg (vLLM's do_remote_decode, SGLang's prefill): when it finishes, its blocks are
   * held under `id` for the decode side to read, for `leaseMs` (default: the engine's lease)
   * unless someone asks for them.
   */
  holdKv?: { id: string; leaseMs?: number }
  /** A decode leg (vLLM's do_remote_prefill with valid parameters, SGLang's decode): its prompt's KV comes from here. */
  remoteKv?: RemoteKvSource
}

export class Sequence {
  state: SeqState = 'pending'
  readonly arrivalAt: number
  readyAt = 0
  /** First admission to the running batch (end of queueing), -1 before. */
  scheduledAt = -1
  firstTokenAt = -1
  finishedAt = -1
  finishReason: FinishReason | null = null
  /** Why it finished with `error`. */
  error: string | null = null
  /** Prompt tokens found in the prefix cache at first admission (usage.prompt_tokens_details.cached_tokens). */
  cachedTokens = 0
  /** Tokens whose KV has been computed (cache hits included). */
  numComputed = 0
  /** Tokens to compute before the next token is sampled: the prompt, or prompt + output after a preemption. */
  prefillTarget: number
  generated = 0
  /** Leading blocks already registered in the cache. */
  registered = 0
  /** Tokens of prefill scheduled in the current step; 0 when the step decodes. */
  chunk = 0
  preemptions = 0
  readonly slots: number[] = []
  /** Prefill leg: the id its blocks are held under once it finishes; the hold, once made. */
  readonly holdId: string | null
  hold: KvHold | null = null
  /** Decode leg: where its KV comes from, until it has arrived (then null: it runs as any sequence). */
  remote: RemoteKvSource | null
  /** Decode leg: its KV arrived; it re-enters the batch with its blocks and only the last token to compute. */
  kvReady = false
  /** Decode leg: prompt tokens found in this engine's cache, and those pulled from the prefill side. */
  localHitTokens = 0
  pulledTokens = 0
  /** Decode leg: simulated ms its pull was accepted and its KV arrived (-1 before). */
  pullStartedAt = -1
  kvArrivedAt = -1
  /** Decode leg: the end of its transfer, on the engine's clock. */
  kvTimer: TimerHandle | null = null
  /** Decode leg: the KV could not be had and was computed here instead (policy recompute). */
  recomputed = false
  // Copied out of `request` (whose shape varies by caller) so the scheduler's loops read
  // fields of one hidden class.
  readonly promptTokens: number
  readonly maxTokens: number
  readonly blockKeys: Float64Array
  readonly onTokens: ((seq: Sequence, count: number, at: number) => void) | null

  constructor(
    readonly id: number,
    readonly request: EngineRequest,
    readonly listener: SeqListener | undefined,
    arrivalAt: number,
  ) {
    this.arrivalAt = arrivalAt
    this.promptTokens = request.promptTokens
    this.maxTokens = request.maxTokens
    this.blockKeys = request.blockKeys
    this.prefillTarget = request.promptTokens
    this.onTokens = listener?.onTokens?.bind(listener) ?? null
    this.holdId = request.holdKv?.id ?? null
    this.remote = request.remoteKv ?? null
  }

  get done(): boolean {
    return this.state === 'finished'
  }
}
