// A request becomes what the pick takes here, before the pick, the same way behind either
// front: its routing key (request-key.ts) and, on an endpoint routed by the exact view, its
// token ids and block-chain seed. This is the one place that holds the tokenizer and chooses
// the instance a remote tokenization asks; the fleet knows instances and models, not tokens.
import type { Logger } from 'pino'
import type { Config } from '../config/config.js'
import type { OpenAIApi } from '../core/key/openai-key.js'
import type { ExactTokens } from '../core/router.js'
import { strategyInfo } from '../core/strategies.js'
import type { Endpoint } from '../fleet/endpoint.js'
import type { RequestTokenizer } from '../tokens/index.js'
import { exactTokens } from '../tokens/request-tokens.js'
import type { OpenAIBody } from './openai-body.js'
import { requestKeyOf, type RequestKey } from './request-key.js'

/** Where the time a tokenization took goes (prefix_router_tokenize_seconds{result}). */
export interface TokenizeTimer {
  observe(values: readonly ['ok' | 'fallback'], seconds: number): void
}

export class RequestKeying {
  /** Per endpoint: the next instance asked for a remote tokenization, in rotation. */
  readonly #next = new WeakMap<Endpoint, number>()

  constructor(
    /** The exact view's tokenizer (config.tokenizer), shared by the endpoints; none without one. */
    readonly tokenizer: RequestTokenizer | undefined,
    readonly timer: TokenizeTimer,
  ) {}

  /** The tokenizer the endpoint's requests get their ids from: only when it routes by the exact view. */
  tokenizerFor(ep: Endpoint): RequestTokenizer | undefined {
    return ep.exact === undefined || !strategyInfo(ep.routing.strategy).exactView ? undefined : this.tokenizer
  }

  /** The pick's arguments from a parsed OpenAI body and the request's tenant header. */
  key(config: Config, log: Logger, ep: Endpoint, tenantHeader: string | string[] | undefined, read: OpenAIBody): RequestKey {
    return requestKeyOf(config, log, ep.name, tenantHeader, read)
  }

  /**
   * The body's token ids for the exact view, timed: undefined at once (no promise) when the
   * endpoint is not routed by it; a promise of undefined when the body is not tokenizable here
   * or the tokenizer failed or answered late, which routes it on the approximate view.
   */
  tokens(ep: Endpoint, api: OpenAIApi, raw: Buffer, model: string | undefined): Promise<ExactTokens | undefined> | undefined {
    const tokenizer = this.tokenizerFor(ep)
    if (tokenizer === undefined) return undefined
    const t0 = performance.now()
    return this.#exact(ep, tokenizer, api, raw, model).then((exact) => {
      this.timer.observe([exact === undefined ? 'fallback' : 'ok'], (performance.now() - t0) / 1000)
      return exact
    })
  }

  /** As tokens, untimed, with the tokenizer the caller found (POST /admin/route's dry run). */
  dryRun(ep: Endpoint, tokenizer: RequestTokenizer, api: OpenAIApi, raw: Buffer, model: string | undefined): Promise<ExactTokens | undefined> {
    return this.#exact(ep, tokenizer, api, raw, model)
  }

  #exact(ep: Endpoint, tokenizer: RequestTokenizer, api: OpenAIApi, raw: Buffer, model: string | undefined): Promise<ExactTokens | undefined> {
    return exactTokens(tokenizer, api, raw, model, ep.isAdapter(model), this.#target(ep, model))
  }

  /** The instance to ask for a remote tokenization of a request for `model`: healthy ones serving it, in turn. */
  #target(ep: Endpoint, model: string | undefined): string | undefined {
    const h = ep.healthy().filter((i) => model === undefined || !i.knowsModels() || i.serves(model))
    if (h.length === 0) return undefined
    const n = this.#next.get(ep) ?? 0
    this.#next.set(ep, n + 1)
    return h[n % h.length]!.id
  }
}
