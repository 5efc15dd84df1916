// SGLang router's `cache_aware` policy, re-implemented from
// sgl-project/sglang sgl-router/src/policies/cache_aware.rs (select_worker) with the
// router's command-line defaults from sgl-router/src/main.rs: cache_threshold 0.3,
// balance_abs_threshold 64, balance_rel_threshold 1.5, eviction_interval 120 s,
// max_tree_size 2^26 characters.
//
// Per request:
//   loads = the router's own count of requests in flight per worker (incremented when it
//           sends one, decremented when the response ends: the RAII load guard);
//   if max − min > balance_abs_threshold and max > min × balance_rel_threshold, the fleet is
//     "imbalanced": send to the least loaded worker (and still insert the text into the
//     tree under it);
//   else match the text against the tree: if matched/length > cache_threshold, send to
//     the matched worker, otherwise to the worker with the smallest tree; insert the text
//     under the chosen worker.
// Every eviction_interval the tree drops least recently used leaves of any worker over
// max_tree_size characters.
//
// The text is SGLang's extract_text_for_routing (sgl-router/src/protocols/spec.rs): the
// contents of all messages joined by spaces, no roles or template; a completions prompt
// as given (arrays joined by spaces). The tenant header is not part of it: SGLang has no
// tenant isolation. `overflow` in the report counts requests sent by the imbalance rule.
import type { PreparedRequest } from '../prepare.js'
import type { Placement, ReplayRouter, RouterFactory } from '../routers.js'
import { ApproxTree } from './radix-tree.js'

export interface CacheAwareConfig {
  cacheThreshold: number
  balanceAbsThreshold: number
  balanceRelThreshold: number
  evictionIntervalMs: number
  maxTreeSize: number
}

export const SGLANG_DEFAULTS: CacheAwareConfig = {
  cacheThreshold: 0.3,
  balanceAbsThreshold: 64,
  balanceRelThreshold: 1.5,
  evictionIntervalMs: 120_000,
  maxTreeSize: 2 ** 26,
}

export const sglangCacheAware: RouterFactory = {
  name: 'sglang_cache_aware',
  source: 'SGLang router cache_aware (sgl-router/src/policies/cache_aware.rs), re-implemented',
  create: (ctx) => new SglangCacheAware(ctx.members),
}

export class SglangCacheAware implements ReplayRouter {
  readonly tree = new ApproxTree()
  private members: number[]
  private readonly load = new Map<number, number>()
  private nextEviction: number

  constructor(
    members: readonly number[],
    private readonly config: CacheAwareConfig = SGLANG_DEFAULTS,
  ) {
    this.members = [...members]
    // init_workers: every worker enters the tree with an empty string (size 0).
    for (const w of this.members) {
      this.tree.insert('', w, 0)
      this.load.set(w, 0)
    }
    this.nextEviction = config.evictionIntervalMs
  }

  /** The router's in-flight count for a worker (what SGLang's worker.load() returns). */
  loadOf(worker: number): number {
    return this.load.get(worker) ?? 0
  }

  route(req: PreparedRequest, now: number): Placement {
    return this.routeText(sglangText(req), now)
  }

  routeText(text: string, now: number): Placement {
    while (now >= this.nextEviction) {
      this.tree.evictBySize(this.config.maxTreeSize)
      this.nextEviction += this.config.evictionIntervalMs
    }
    let max = -Infinity
    let min = Infinity
    let leastLoaded = this.members[0]!
    for (const w of this.members) {
      const l = this.loadOf(w)
      if (l > max) max = l
      if (l < min) {
        min = l
        leastLoaded = w
      }
    }
    const c = this.config
    let chosen: number
    let overflow = false
    if (max - min > c.balanceAbsThreshold && max > min * c.balanceRelThreshold) {
      chosen = leastLoaded
      overflow = true
    } else {
      const { matched, worker } = this.tree.prefixMatch(text, now)
      const rate = text.length === 0 ? 0 : matched / text.length
      chosen = rate > c.cacheThreshold ? worker : this.tree.smallest()
      // A worker that left the fleet: cache_aware.rs drops it from the tree and falls back
      // to the first healthy worker.
      if (!this.members.includes(chosen)) {
        if (chosen >= 0) this.tree.removeWorker(chosen)
        chosen = this.members[0]!
      }
    }
    this.tree.insert(text, chosen, now)
    this.load.set(chosen, this.loadOf(chosen) + 1)
    let done = false
    return {
      instance: chosen,
      overflow,
      finish: () => {
        if (done) return
        done = true
        this.load.set(chosen, this.loadOf(chosen) - 1)
      },
    }
  }

  setInstances(members: readonly number[]): void {
    for (const w of this.members) if (!members.includes(w)) this.tree.removeWorker(w)
    for (const w of members) {
      if (!this.members.includes(w)) {
        this.tree.insert('', w, 0) // add_worker
        if (!this.load.has(w)) this.load.set(w, 0)
      }
    }
    this.members = [...members]
  }

  close(): void {}
}

/** SGLang's routing text for an OpenAI body (extract_text_for_routing). */
export function sglangText(req: Pick<PreparedRequest, 'api' | 'body'>): string {
  const b = req.body
  if (req.api === 'completions') {
    const p = b.prompt
    if (typeof p === 'string') return p
    if (Array.isArray(p)) return p.map(String).join(' ')
    return ''
  }
  const parts: string[] = []
  for (const m of (b.messages as unknown[] | undefined) ?? []) {
    if (m === null || typeof m !== 'object') continue
    const msg = m as { role?: unknown; content?: unknown; reasoning_content?: unknown }
    const content = partsText(msg.content)
    if (msg.role === 'assistant') {
      const reasoning = typeof msg.reasoning_content === 'string' ? msg.reasoning_content : ''
      if (content === '' && reasoning === '') continue
      parts.push(`${content} ${reasoning}`.trim())
    } else parts.push(content)
  }
  return parts.join(' ')
}

function partsText(content: unknown): string {
  if (typeof content === 'string') return content
  if (!Array.isArray(content)) return ''
  const texts: string[] = []
  for (const p of content) {
    if (p !== null && typeof p === 'object' && (p as { type?: unknown }).type === 'text') {
      const t = (p as { text?: unknown }).text
      if (typeof t === 'string') texts.push(t)
    }
  }
  return texts.join(' ')
}

