// What the router asks of a tokenizer: the token ids the engine will compute for a request
// (chat template applied, then the model's tokenizer), before it picks an instance, so that
// the exact cache view can match the request's blocks against what engines report holding.
import { InvalidArgTypeError } from '../core/errors.js'

export type TokenizeInput =
  | {
      kind: 'chat'
      model: string
      /** OpenAI messages as the client sent them. */
      messages: unknown[]
      tools?: unknown
      /** Default true, as in vLLM. */
      addGenerationPrompt?: boolean
      /** Default false for chats, as in vLLM (the template writes its own BOS). */
      addSpecialTokens?: boolean
      /** The request's chat_template_kwargs (e.g. enable_thinking), passed to the template. */
      chatTemplateKwargs?: Record<string, unknown>
    }
  | {
      kind: 'completion'
      model: string
      /** Text, or token ids (which are the tokens: no tokenizer is asked). */
      prompt: string | number[]
      /** Default true for completions, as in vLLM (the post-processor's BOS). */
      addSpecialTokens?: boolean
    }

export interface TokenizerStats {
  /** Calls to tokens(). */
  requests: number
  /** Answered from the cache: whole requests (remote) or rendered segments (local), see cacheMisses. */
  cacheHits: number
  cacheMisses: number
  /** Calls answered undefined for any reason but a timeout (bad answer, refused, bad input, closed). */
  failures: number
  /** Calls answered undefined because the answer did not come in time (remote only). */
  timeouts: number
  /** What the cache holds now. */
  cacheEntries: number
  cacheBytes: number
  /** Why the last failure (or timeout) failed: shown in /admin/instances. */
  lastFailure: string | undefined
  /** When it did (ms since the epoch). */
  lastFailureAt: number | undefined
  /** Calls answered undefined, by reason (FallbackReason): prefix_router_tokenizer_fallbacks_total. */
  fallbacks: Partial<Record<FallbackReason, number>>
}

/**
 * Why a request was routed on the approximate view rather than by its token ids: timeout (the
 * answer came too late), too_large (more ids or bytes than the request can have), malformed
 * (not JSON, a bad id, a count that disagrees), refused (the instance answered another status
 * than 200), unreachable (the call failed), input (the request cannot be tokenized as given:
 * a bad token-id prompt, a message the template refuses), unavailable (no instance to ask, or
 * the tokenizer is closed).
 */
export type FallbackReason = 'timeout' | 'too_large' | 'malformed' | 'refused' | 'unreachable' | 'input' | 'unavailable'

export interface RequestTokenizer {
  readonly mode: 'remote' | 'local'
  /**
   * The ids, or undefined when they cannot be had in time (the caller falls back to the
   * approximate view). Throws only for an input that is not a TokenizeInput at all.
   */
  tokens(input: TokenizeInput, instanceUrl?: string): Promise<Uint32Array | undefined>
  stats(): TokenizerStats
  close(): Promise<void>
}

/** Counters every tokenizer keeps; the cache fields are filled in by stats(). */
export class Counters {
  requests = 0
  cacheHits = 0
  cacheMisses = 0
  failures = 0
  timeouts = 0
  lastFailure: string | undefined = undefined
  lastFailureAt: number | undefined = undefined
  readonly fallbacks: Partial<Record<FallbackReason, number>> = {}

  /** A call answered undefined for `reason` (a timeout counts in timeouts, any other in failures). */
  fail(why: string, reason: FallbackReason = 'input'): undefined {
    if (reason === 'timeout') this.timeouts++
    else this.failures++
    this.fallbacks[reason] = (this.fallbacks[reason] ?? 0) + 1
    this.lastFailure = why
    this.lastFailureAt = Date.now()
    return undefined
  }

  snapshot(cacheEntries: number, cacheBytes: number): TokenizerStats {
    const { requests, cacheHits, cacheMisses, failures, timeouts, lastFailure, lastFailureAt } = this
    return { requests, cacheHits, cacheMisses, failures, timeouts, cacheEntries, cacheBytes, lastFailure, lastFailureAt, fallbacks: { ...this.fallbacks } }
  }
}

/** Throws for what is not a TokenizeInput: a caller's mistake, not a request to fall back on. */
export function checkInput(input: TokenizeInput): void {
  if (typeof input !== 'object' || input === null) throw new InvalidArgTypeError('input', 'a TokenizeInput object', input)
  if (typeof input.model !== 'string') throw new InvalidArgTypeError('input.model', 'a string', input.model)
  if (input.kind === 'chat') {
    if (!Array.isArray(input.messages)) throw new InvalidArgTypeError('input.messages', 'an array', input.messages)
    optionalBool('input.addGenerationPrompt', input.addGenerationPrompt)
    optionalBool('input.addSpecialTokens', input.addSpecialTokens)
    const k = input.chatTemplateKwargs
    if (k !== undefined && (typeof k !== 'object' || k === null || Array.isArray(k))) {
      throw new InvalidArgTypeError('input.chatTemplateKwargs', 'an object', k)
    }
  } else if (input.kind === 'completion') {
    if (typeof input.prompt !== 'string' && !Array.isArray(input.prompt)) {
      throw new InvalidArgTypeError('input.prompt', 'a string or an array of token ids', input.prompt)
    }
    optionalBool('input.addSpecialTokens', input.addSpecialTokens)
  } else {
    throw new InvalidArgTypeError('input.kind', "'chat' or 'completion'", (input as { kind: unknown }).kind)
  }
}

function optionalBool(key: string, v: unknown): void {
  if (v !== undefined && typeof v !== 'boolean') throw new InvalidArgTypeError(key, 'a boolean', v)
}

/** A completion's token-id prompt as ids, or a reason it is not one. */
export function idsOf(prompt: readonly unknown[]): Uint32Array | string {
  const out = new Uint32Array(prompt.length)
  for (let i = 0; i < prompt.length; i++) {
    const x = prompt[i]
    if (typeof x !== 'number' || !Number.isInteger(x) || x < 0 || x >= 2 ** 32) {
      return `prompt[${i}] is not a token id (an integer from 0 to ${2 ** 32 - 1})`
    }
    out[i] = x
  }
  return out
}
