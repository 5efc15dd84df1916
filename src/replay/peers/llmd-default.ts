// llm-d's default scheduler (the Endpoint Picker of kubernetes-sigs/gateway-api-inference-
// extension as llm-d installs it), re-implemented from its sources:
//   profile   default-plugins.yaml (config/charts/inferencepool/templates/epp-config.yaml):
//             queue-scorer weight 2, kv-cache-utilization-scorer weight 2,
//             prefix-cache-scorer weight 3, max-score picker;
//   queue     pkg/epp/scheduling/framework/plugins/scorer/queue.go:
//             (maxQueue − queue) / (maxQueue − minQueue) over the candidates, 1 if all equal;
//             queue = vllm:num_requests_waiting;
//   KV        scorer/kvcache_utilization.go: 1 − vllm:kv_cache_usage_perc;
//   prefix    plugins/multi/prefix/plugin.go + indexer.go: the prompt cut to 256 blocks of
//             64 bytes, block 0's hash = hash(model), block i's = hash(block i, hash i−1);
//             score = (leading hashes some server was sent) / (hashes), counted per server
//             as matchLongestPrefix does; after picking, all the request's hashes are
//             added to the picked server's LRU of 31,250 hashes (PreRequest);
//   metrics   scraped every 50 ms (runserver DefaultRefreshMetricsInterval): here, all
//             engines are read when a pick finds the last reading 50 ms old or older.
// The chat prompt is GIE's: "<|im_start|>{role}\n{content}<|im_end|>\n" per message with
// string content (util/request/body.go). Simplifications: XXH3 (our native one) instead of
// cespare/xxhash for block hashes (any good 64-bit hash routes the same); ties among the
// top scores are broken by a seeded draw; flow control and saturation detection (admission
// queues in front of the picker) are not modelled. No `overflow` notion: `null`.
import { xxh3 } from '../../core/hash.js'
import { native } from '../../core/native.js'
import type { PreparedRequest } from '../prepare.js'
import { Rng } from '../rng.js'
import type { Placement, ReplayRouter, RouterContext, RouterFactory } from '../routers.js'
import { PrefixIndexer } from './prefix-indexer.js'

export interface LlmdConfig {
  queueWeight: number
  kvWeight: number
  prefixWeight: number
  hashBlockSize: number
  maxPrefixBlocks: number
  lruCapacityPerServer: number
  metricsIntervalMs: number
}

export const LLMD_DEFAULTS: LlmdConfig = {
  queueWeight: 2,
  kvWeight: 2,
  prefixWeight: 3,
  hashBlockSize: 64,
  maxPrefixBlocks: 256,
  lruCapacityPerServer: 31_250,
  metricsIntervalMs: 50,
}

export const llmdDefault: RouterFactory = {
  name: 'llmd_default',
  source: 'llm-d default scheduler (gateway-api-inference-extension EPP: queue 2, KV 2, prefix 3), re-implemented',
  create: (ctx) => new LlmdDefault(ctx),
}

/** What the scheduler reads of an engine (a SimEngine has both). */
export interface EngineSignals {
  /** vllm:num_requests_waiting */
  readonly numWaiting: number
  /** vllm:kv_cache_usage_perc is cache.usage */
  readonly cache: { readonly usage: number }
}

/** What the picker reads from a server's /metrics. */
export interface ServerMetrics {
  waiting: number
  kvUsage: number
}

export class LlmdDefault implements ReplayRouter {
  readonly indexer: PrefixIndexer
  private members: number[]
  private readonly metrics = new Map<number, ServerMetrics>()
  private scrapedAt = -Infinity
  private readonly rng: Rng
  private readonly modelHashes = new Map<string, bigint>()

  constructor(
    private readonly ctx: Pick<RouterContext, 'members' | 'model' | 'seed'> & { engines: readonly EngineSignals[] },
    private readonly config: LlmdConfig = LLMD_DEFAULTS,
  ) {
    this.members = [...ctx.members]
    this.indexer = new PrefixIndexer(config.lruCapacityPerServer, ctx.engines.length)
    this.rng = new Rng(ctx.seed, 'llmd_default/ties')
  }

  route(req: PreparedRequest, now: number): Placement {
    const model = typeof req.body.model === 'string' ? req.body.model : this.ctx.model
    return this.routePrompt(gieChatPrompt(req, this.config.hashBlockSize * this.config.maxPrefixBlocks), now, model)
  }

  routePrompt(prompt: string, now: number, model = this.ctx.model): Placement {
    if (now - this.scrapedAt >= this.config.metricsIntervalMs) this.scrape(now)
    const hashes = this.hashPrompt(prompt, model)
    const matched = this.indexer.match(hashes)
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
      const kv = 1 - m.kvUsage
      const prefix = hashes.length === 0 ? 0 : matched[s]! / hashes.length
      const score = c.queueWeight * queue + c.kvWeight * kv + c.prefixWeight * prefix
      if (score > best) {
        best = score
        ties = [s]
      } else if (score === best) ties.push(s)
    }
    const chosen = ties.length === 1 ? ties[0]! : ties[this.rng.int(ties.length)]!
    this.indexer.add(hashes, chosen)
    return { instance: chosen, overflow: null, finish: () => {} }
  }

  /** Reads every engine's vllm:num_requests_waiting and vllm:kv_cache_usage_perc. */
  scrape(now: number): void {
    for (const s of this.members) {
      const e = this.ctx.engines[s]!
      this.metrics.set(s, { waiting: e.numWaiting, kvUsage: e.cache.usage })
    }
    this.scrapedAt = now
  }

  /** hashPrompt of plugin.go, with block keys as 52-bit numbers. */
  hashPrompt(prompt: string, model = this.ctx.model): Float64Array {
    const bs = this.config.hashBlockSize
    const limit = bs * this.config.maxPrefixBlocks
    // At most `limit` bytes are used; that many UTF-16 units are at least that many bytes.
    let bytes = Buffer.from(prompt.length > limit ? prompt.slice(0, limit) : prompt)
    if (bytes.length < bs) return new Float64Array(0)
    if (bytes.length > limit) bytes = bytes.subarray(0, limit)
    let m = this.modelHashes.get(model)
    if (m === undefined) {
      m = xxh3(model)
      this.modelHashes.set(model, m)
    }
    // [hash(model), hash(block 0, hash(model)), hash(block 1, …), …] in one native call.
    const out = new Float64Array(1 + Math.floor(bytes.length / bs))
    out[0] = Number(BigInt.asUintN(52, m))
    native.xxh3_chain(bytes, bs, m, out.subarray(1))
    return out
  }

  setInstances(members: readonly number[], now: number): void {
    this.members = [...members]
    this.scrape(now)
  }

  close(): void {}
}

/**
 * GIE's prompt for a chat body (util/request/body.go), or the completions prompt, built
 * only as far as `limit` UTF-16 units (the scorer reads at most 16 KiB of it).
 */
export function gieChatPrompt(req: Pick<PreparedRequest, 'api' | 'body'>, limit = Infinity): string {
  const b = req.body
  if (req.api === 'completions') return typeof b.prompt === 'string' ? b.prompt : ''
  let out = ''
  for (const m of (b.messages as unknown[] | undefined) ?? []) {
    if (out.length >= limit) break
    if (m === null || typeof m !== 'object') continue
    const { role, content } = m as { role?: unknown; content?: unknown }
    if (typeof role !== 'string' || typeof content !== 'string') continue
    const room = limit - out.length
    out += `<|im_start|>${role}\n${content.length > room ? content.slice(0, room) : content}<|im_end|>\n`
  }
  return out
}
