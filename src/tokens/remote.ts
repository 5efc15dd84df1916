// Token ids from the engine itself: vLLM's POST /tokenize on one instance of the endpoint
// (the caller picks which). The engine renders its own chat template with its own tokenizer,
// so the ids are exact for any model, at the cost of a round trip before the pick; a slow or
// broken answer must not hold the request, so every call is bounded by a timeout and any
// failure is an undefined (the approximate view) and a counter, never an error.
//
// The cache holds whole requests, keyed by the body sent. A finer cache (the ids of
// messages[0..k] as a prefix of the whole) would be exact only for templates that render
// each message independently of the ones after it, which the router cannot see from here
// (some drop past reasoning, some mark the last message), so it is not attempted.
import { Agent, request, type Dispatcher } from 'undici'
import { xxh3 } from '../core/hash.js'
import { OutOfRangeError } from '../core/errors.js'
import { BoundedLru } from './lru.js'
import { checkInput, Counters, idsOf, type FallbackReason, type RequestTokenizer, type TokenizeInput, type TokenizerStats } from './types.js'
import { maxAnswerBytes, maxTokenIds, TokenizeAnswer } from './tokenize-answer.js'

export interface RemoteTokenizerOptions {
  /**
   * How long to wait for an answer, in ms, before `timeoutMsPerMiB` adds for the body's
   * size (default 50). A short chat's /tokenize takes vLLM a millisecond or two; 50 ms
   * leaves room for a busy API process and a network hop while staying under what a
   * short prompt's cache hit saves, so waiting longer would cost more than the
   * approximate view it falls back to.
   */
  timeoutMs?: number
  /**
   * More time per MiB of request body (default 500, i.e. 0.5 ms a KiB). Tokenizing is
   * linear in the text: Hugging Face's Rust tokenizer took 0.4-0.9 ms a KiB of chat here
   * (bench/tokens.bench.ts), so a 32k-token chat (~128 KiB) needs ~60 ms more than a
   * short one, and its cache hit saves seconds of prefill, well worth the wait.
   */
  timeoutMsPerMiB?: number
  /** undici dispatcher for the calls (default: an Agent of our own, closed by close()). */
  dispatcher?: Dispatcher
  /** Cached answers (default 1024); 0 turns the cache off. */
  cacheEntries?: number
  /** Bytes the cache may hold, request bodies and ids counted (default 64 MiB). */
  cacheBytes?: number
}

export const DEFAULT_REMOTE_TIMEOUT_MS = 50
export const DEFAULT_REMOTE_TIMEOUT_MS_PER_MIB = 500
/**
 * An answer larger than this is refused whatever the request's size: 4M tokens of JSON, far
 * past any context. A smaller request gets a smaller bound (maxAnswerBytes).
 */
const MAX_ANSWER_BYTES = 32 * 1024 * 1024

interface Cached {
  body: string
  ids: Uint32Array
}

export function remoteTokenizer(o: RemoteTokenizerOptions = {}): RequestTokenizer {
  const timeoutMs = o.timeoutMs ?? DEFAULT_REMOTE_TIMEOUT_MS
  if (!Number.isFinite(timeoutMs) || timeoutMs <= 0) throw new OutOfRangeError('timeoutMs', 'a positive number of milliseconds', timeoutMs)
  const perMiB = o.timeoutMsPerMiB ?? DEFAULT_REMOTE_TIMEOUT_MS_PER_MIB
  if (!Number.isFinite(perMiB) || perMiB < 0) throw new OutOfRangeError('timeoutMsPerMiB', 'a number of milliseconds >= 0', perMiB)
  const entries = o.cacheEntries ?? 1024
  if (!Number.isInteger(entries) || entries < 0) throw new OutOfRangeError('cacheEntries', 'an integer >= 0', entries)
  const maxBytes = o.cacheBytes ?? 64 * 1024 * 1024
  if (!Number.isInteger(maxBytes) || maxBytes < 0) throw new OutOfRangeError('cacheBytes', 'an integer >= 0', maxBytes)
  return new RemoteTokenizer(timeoutMs, perMiB, o.dispatcher, new BoundedLru<Cached>(entries, maxBytes))
}

class RemoteTokenizer implements RequestTokenizer {
  readonly mode = 'remote'
  private readonly counters = new Counters()
  private readonly inFlight = new Map<string, Promise<Uint32Array | Failure>>()
  private readonly closing = new AbortController()
  private readonly dispatcher: Dispatcher
  private readonly ownAgent: Agent | undefined

  constructor(
    private readonly timeoutMs: number,
    private readonly timeoutMsPerMiB: number,
    dispatcher: Dispatcher | undefined,
    private readonly cache: BoundedLru<Cached>,
  ) {
    // Keep-alive connections: a new TCP connection per request would cost most of the budget.
    this.ownAgent = dispatcher === undefined ? new Agent({ keepAliveTimeout: 30_000, connections: 16 }) : undefined
    this.dispatcher = dispatcher ?? this.ownAgent!
  }

  async tokens(input: TokenizeInput, instanceUrl?: string): Promise<Uint32Array | undefined> {
    checkInput(input)
    const c = this.counters
    c.requests++
    if (this.closing.signal.aborted) return c.fail('the tokenizer is closed', 'unavailable')
    if (input.kind === 'completion' && Array.isArray(input.prompt)) {
      const ids = idsOf(input.prompt)
      return typeof ids === 'string' ? c.fail(ids) : ids
    }
    if (instanceUrl === undefined) return c.fail('no instance to ask', 'unavailable')
    const body = requestBody(input)
    const key = xxh3(body).toString(36)
    const hit = this.cache.get(key)
    if (hit !== undefined && hit.body === body) {
      c.cacheHits++
      return hit.ids.slice()
    }
    c.cacheMisses++
    // The same body asked twice at once (a retried request, a burst of one prompt) is one call.
    let pending = this.inFlight.get(key)
    if (pending === undefined) {
      pending = this.ask(instanceUrl, body).finally(() => this.inFlight.delete(key))
      this.inFlight.set(key, pending)
    }
    const ids = await pending
    if (!(ids instanceof Uint32Array)) return c.fail(ids.why, ids.reason)
    if (this.cache.maxEntries > 0) this.cache.set(key, { body, ids }, body.length * 2 + ids.byteLength + 64)
    return ids.slice()
  }

  private async ask(instanceUrl: string, body: string): Promise<Uint32Array | Failure> {
    const ms = Math.ceil(this.timeoutMs + (this.timeoutMsPerMiB * body.length) / (1024 * 1024))
    const timeout = AbortSignal.timeout(ms)
    const signal = AbortSignal.any([timeout, this.closing.signal])
    // The answer's bound, from the request's own size (tokenize-answer.ts says why).
    const maxIds = maxTokenIds(Buffer.byteLength(body))
    const maxBytes = Math.min(MAX_ANSWER_BYTES, maxAnswerBytes(maxIds))
    const where = `${instanceUrl}/tokenize`
    try {
      const res = await request(tokenizeUrl(instanceUrl), {
        method: 'POST',
        headers: { 'content-type': 'application/json', accept: 'application/json' },
        body,
        dispatcher: this.dispatcher,
        signal,
      })
      if (res.statusCode !== 200) {
        await res.body.dump().catch(() => {})
        return fail('refused', `${where} answered ${res.statusCode}`)
      }
      const tooLarge = () => fail('too_large', `${where} answered more than ${maxBytes} bytes, more than ${maxIds} ids can take (the request is ${Buffer.byteLength(body)} bytes)`)
      const length = Number(res.headers['content-length'])
      // Refused before a byte of it is read when its length says so; else as the bytes come.
      if (length > maxBytes) {
        res.body.destroy()
        return tooLarge()
      }
      const answer = new TokenizeAnswer(maxIds)
      let size = 0
      for await (const chunk of res.body as AsyncIterable<Buffer>) {
        size += chunk.length
        if (size > maxBytes) {
          res.body.destroy()
          return tooLarge()
        }
        const why = answer.push(chunk)
        if (why !== undefined) {
          res.body.destroy()
          return answerFailure(where, answer, why)
        }
      }
      const ids = answer.end()
      return typeof ids === 'string' ? answerFailure(where, answer, ids) : ids
    } catch (err) {
      if (timeout.aborted) return fail('timeout', `${where} did not answer within ${ms} ms`)
      return fail('unreachable', `${where} failed: ${(err as Error)?.message ?? String(err)}`)
    }
  }

  stats(): TokenizerStats {
    return this.counters.snapshot(this.cache.size, this.cache.bytes)
  }

  async close(): Promise<void> {
    if (this.closing.signal.aborted) return
    this.closing.abort()
    this.cache.clear()
    await this.ownAgent?.close()
  }
}

/** vLLM's /tokenize body for the request: the chat or completion form, as its protocol defines them. */
export function requestBody(input: TokenizeInput): string {
  if (input.kind === 'completion') {
    return JSON.stringify({ model: input.model, prompt: input.prompt, add_special_tokens: input.addSpecialTokens ?? true })
  }
  const body: Record<string, unknown> = {
    model: input.model,
    messages: input.messages,
    add_generation_prompt: input.addGenerationPrompt ?? true,
    add_special_tokens: input.addSpecialTokens ?? false,
  }
  if (input.tools !== undefined && input.tools !== null) body.tools = input.tools
  if (input.chatTemplateKwargs !== undefined) body.chat_template_kwargs = input.chatTemplateKwargs
  return JSON.stringify(body)
}

/** /tokenize lives at the server's root, beside /v1 (an instance URL may carry a path prefix of a gateway). */
function tokenizeUrl(instanceUrl: string): string {
  return `${instanceUrl.replace(/\/+$/, '')}/tokenize`
}

interface Failure {
  reason: FallbackReason
  why: string
}

const fail = (reason: FallbackReason, why: string): Failure => ({ reason, why })

/** What TokenizeAnswer refused, as a Failure: more ids than the request can have is too_large, the rest malformed. */
function answerFailure(where: string, answer: TokenizeAnswer, why: string): Failure {
  return fail(answer.tooMany ? 'too_large' : 'malformed', `${where} answered ${why}`)
}
