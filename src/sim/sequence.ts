// One request inside an engine: its prompt (as token count and block hashes), its
// progress and the blocks it pins. Times are simulated milliseconds.

export type FinishReason = 'stop' | 'length' | 'abort'
export type SeqState = 'pending' | 'waiting' | 'running' | 'finished'

export interface SeqListener {
  /** Tokens were generated (one per step; the first one at the end of prefill). */
  onTokens?(seq: Sequence, count: number, at: number): void
  /** The sequence finished (`seq.finishReason`), including by abort. */
  onFinish?(seq: Sequence, at: number): void
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
  }

  get done(): boolean {
    return this.state === 'finished'
  }
}
