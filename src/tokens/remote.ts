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
import { checkInput, Counters, idsOf, type RequestTokenizer, type TokenizeInput, type TokenizerStats } from './types.js'

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
/** An answer larger than this is refused: 4M tokens of JSON, far past any context. */
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
    if (this.closing.signal.aborted) return c.fail('the tokenizer is closed')
    if (input.kind === 'completion' && Array.isArray(input.prompt)) {
      const ids = idsOf(input.prompt)
      return typeof ids === 'string' ? c.fail(ids) : ids
    }
    if (instanceUrl === undefined) return c.fail('no instance to ask')
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
    if (!(ids instanceof Uint32Array)) {
      if (!ids.timeout) return c.fail(ids.why)
      c.timeouts++
      c.lastFailure = ids.why
      return undefined
    }
    if (this.cache.maxEntries > 0) this.cache.set(key, { body, ids }, body.length * 2 + ids.byteLength + 64)
    return ids.slice()
  }

  private async ask(instanceUrl: string, body: string): Promise<Uint32Array | Failure> {
    const ms = Math.ceil(this.timeoutMs + (this.timeoutMsPerMiB * body.length) / (1024 * 1024))
    const timeout = AbortSignal.timeout(ms)
    const signal = AbortSignal.any([timeout, this.closing.signal])
    let text: string
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
        return fail(`${instanceUrl}/tokenize answered ${res.statusCode}`)
      }
      const chunks: Buffer[] = []
      let size = 0
      for await (const chunk of res.body as AsyncIterable<Buffer>) {
        size += chunk.length
        if (size > MAX_ANSWER_BYTES) {
          res.body.destroy()
          return fail(`${instanceUrl}/tokenize answered more than ${MAX_ANSWER_BYTES} bytes`)
        }
        chunks.push(chunk)
      }
      text = Buffer.concat(chunks).toString('utf8')
    } catch (err) {
      if (timeout.aborted) return { timeout: true, why: `${instanceUrl}/tokenize did not answer within ${ms} ms` }
      return fail(`${instanceUrl}/tokenize failed: ${(err as Error)?.message ?? String(err)}`)
    }
    return parseAnswer(text, instanceUrl)
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
  timeout: boolean
  why: string
}

const fail = (why: string): Failure => ({ timeout: false, why })

function parseAnswer(text: string, instanceUrl: string): Uint32Array | Failure {
  let j: unknown
  try {
    j = JSON.parse(text)
  } catch {
    return fail(`${instanceUrl}/tokenize answered a body that is not JSON`)
  }
  const a = j as { tokens?: unknown; count?: unknown }
  if (typeof j !== 'object' || j === null || !Array.isArray(a.tokens)) {
    return fail(`${instanceUrl}/tokenize answered no 'tokens' array`)
  }
  const ids = idsOf(a.tokens)
  if (typeof ids === 'string') return fail(`${instanceUrl}/tokenize answered a bad id: ${ids.replace('prompt', 'tokens')}`)
  if (a.count !== undefined && a.count !== ids.length) {
    return fail(`${instanceUrl}/tokenize answered count ${String(a.count)} for ${ids.length} tokens`)
  }
  return ids
}
