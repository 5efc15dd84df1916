// llm-d's precise prefix-cache scheduling (the "precise-prefix-cache-aware" well-lit path),
// re-implemented from its sources:
//   profile   llm-d/llm-d-inference-scheduler deploy/config/epp-precise-prefix-cache-config.yaml:
//             precise-prefix-cache-scorer weight 2, kv-cache-utilization-scorer weight 1,
//             queue-scorer weight 1, max-score picker; speculative indexing off (the
//             plugin's default), so only confirmed KV events fill the index;
//   prefix    pkg/plugins/scorer/precise_prefix_cache.go with llm-d-kv-cache's indexer: the
//             prompt's token ids in blocks of the engine's block size (the config says it
//             must match vLLM's: 16 here), each block keyed by a hash chained from its
//             parent's; per pod, the count of leading blocks the KV-event-fed index holds
//             for it (computeScoresFromKeyToPods, the LongestPrefixScorer); then
//             indexedScoresToNormalizedScoredPods (scorer/utils.go): min-max over the pods
//             holding at least the first block, 1 for all of them when they tie, 0 for a
//             pod holding none; BlockRemoved evicts, AllBlocksCleared drops the pod;
//   queue     GIE scorer/queue.go: (maxQ − q) / (maxQ − minQ), 1 if all equal, q =
//             vllm:num_requests_waiting;
//   KV        GIE scorer/kvcache_utilization.go: 1 − vllm:kv_cache_usage_perc;
//   metrics   scraped every 50 ms (GIE's refresh interval), as llmd-default.ts reads them.
// The index sees each engine's KV events after the replay's --kv-events-delay, the same
// stream our own events lane gets. Simplifications: the request's token ids are the
// engine's own (llm-d tokenizes with the model's tokenizer and chat template, configured to
// match vLLM's); ties among top scores are broken by a seeded draw; no `overflow` notion.
import type { KvEvent } from '../../fleet/events/types.js'
import type { PreparedRequest } from '../prepare.js'
import { Rng } from '../rng.js'
import type { Placement, ReplayRouter, RouterContext, RouterFactory } from '../routers.js'
import { KvEventIndex } from './kv-event-index.js'
import type { EngineSignals, ServerMetrics } from './llmd-default.js'

export interface LlmdPreciseConfig {
  prefixWeight: number
  kvWeight: number
  queueWeight: number
  metricsIntervalMs: number
}

export const LLMD_PRECISE_DEFAULTS: LlmdPreciseConfig = { prefixWeight: 2, kvWeight: 1, queueWeight: 1, metricsIntervalMs: 50 }

export const llmdPrecise: RouterFactory = {
  name: 'llmd_precise',
  source: 'llm-d precise prefix-cache scheduling (KV-event index: prefix 2, KV 1, queue 1), re-implemented',
  create: (ctx) => new LlmdPrecise(ctx),
}

export class LlmdPrecise implements ReplayRouter {
  readonly index: KvEventIndex
  private members: number[]
  private readonly metrics = new Map<number, ServerMetrics>()
  private scrapedAt = -Infinity
  private readonly rng: Rng

  constructor(
    private readonly ctx: Pick<RouterContext, 'members' | 'model' | 'seed' | 'blockSize'> & { engines: readonly EngineSignals[] },
    private readonly config: LlmdPreciseConfig = LLMD_PRECISE_DEFAULTS,
  ) {
    this.members = [...ctx.members]
    this.index = new KvEventIndex(ctx.engines.length, ctx.blockSize, 'llm-d')
    this.rng = new Rng(ctx.seed, 'llmd_precise/ties')
  }

  readonly kvEvents = (instance: number, events: readonly KvEvent[]): void => {
    this.index.apply(instance, events, this.ctx.model)
  }

  route(req: PreparedRequest, now: number): Placement {
    const ids = req.prompt.tokenIds
    if (ids === undefined) throw new Error('llmd_precise needs the prompts\' token ids (prepare with tokens)')
    return this.routeTokens(ids, now, req.cacheSalt)
  }

  routeTokens(tokenIds: Uint32Array, now: number, salt?: string): Placement {
    if (now - this.scrapedAt >= this.config.metricsIntervalMs) this.scrape(now)
    const keys = this.index.requestKeys(tokenIds, this.index.seed(this.ctx.model, salt))
    const prefix = this.prefixScores(keys)
    let minQ = Infinity
    let maxQ = -Infinity
    for (const s of this.members) {
      const q = this.metrics.get(s)!.waiting
      if (q < minQ) minQ = q
      if (q > maxQ) maxQ = q
    }
    const c = this.config
    let best = -Infinity
    let ties: number[] = []
    for (const s of this.members) {
      const m = this.metrics.get(s)!
      const queue = maxQ === minQ ? 1 : (maxQ - m.waiting) / (maxQ - minQ)
      const score = c.prefixWeight * (prefix.get(s) ?? 0) + c.kvWeight * (1 - m.kvUsage) + c.queueWeight * queue
      if (score > best) {
        best = score
        ties = [s]
      } else if (score === best) ties.push(s)
    }
    const chosen = ties.length === 1 ? ties[0]! : ties[this.rng.int(ties.length)]!
    return { instance: chosen, overflow: null, finish: () => {} }
  }

  /**
   * The precise scorer's normalized scores: only pods holding the request's first block get
   * a raw score (its longest cached prefix in blocks); those are min-max normalized, all 1
   * when they tie; the others score 0.
   */
  prefixScores(keys: Float64Array): Map<number, number> {
    const raw = new Map<number, number>()
    for (const [pod, n] of this.index.longestPrefix(keys, this.members)) if (n > 0) raw.set(pod, n)
    let min = Infinity
    let max = -Infinity
    for (const n of raw.values()) {
      if (n < min) min = n
      if (n > max) max = n
    }
    const out = new Map<number, number>()
    for (const [pod, n] of raw) out.set(pod, min === max ? 1 : (n - min) / (max - min))
    return out
  }

  /** Reads every engine's vllm:num_requests_waiting and vllm:kv_cache_usage_perc. */
  scrape(now: number): void {
    for (const s of this.members) {
      const e = this.ctx.engines[s]!
      this.metrics.set(s, { waiting: e.numWaiting, kvUsage: e.cache.usage })
    }
    this.scrapedAt = now
  }

  setInstances(members: readonly number[], now: number): void {
    this.members = [...members]
    this.scrape(now)
  }

  close(): void {}
}
