// NVIDIA Dynamo's KV router (ai-dynamo/dynamo, lib/llm/src/kv_router/), re-implemented from
// its sources with its defaults (KvRouterConfig::default: overlap_score_weight 1.0,
// router_temperature 0.0, use_kv_events true, router_track_active_blocks true):
//   overlap   the indexer (indexer.rs, a radix tree fed by the workers' KV events, blocks
//             keyed by a hash of their tokens chained from the parent's): per worker, the
//             request's leading blocks it holds;
//   load      the router's own bookkeeping of what it routed (sequence.rs, ActiveSequences):
//             per worker, the prefill tokens of its requests whose prefill has not ended
//             (add_request adds isl − overlap × block_size, mark_prefill_completed at the
//             first token removes them) and the distinct blocks of its active requests
//             (removed when the request is freed at its end);
//   cost      scheduler.rs, DefaultWorkerSelector::select_worker: for each worker,
//               prefill_blocks = (isl − overlap × block_size + active prefill tokens) / block_size
//               decode_blocks  = the request's blocks not among its active ones + its active blocks
//               logit          = overlap_score_weight × prefill_blocks + decode_blocks
//             lowest logit wins (temperature 0: softmax_sample returns the minimum, within
//             1e-5); ties go to the worker with the smallest tree (fewest indexed blocks),
//             then (HashMap order in Dynamo) a seeded draw here.
// block_size is the engines' (Dynamo reads kv_cache_block_size from the workers). The index
// sees each engine's KV events after the replay's --kv-events-delay, the same stream our own
// events lane gets. Simplifications: the request's token ids are the engine's own (Dynamo's
// frontend tokenizes with the model's tokenizer); no `overflow` notion.
// `dynamo_kv:sync` is the same with Dynamo's router replica sync (--router-replica-sync: the
// replicas publish their ActiveSequences changes to each other over NATS), modelled as one
// ActiveSequences per worker shared by every replica of the lane, with no delay: an upper bound
// on what the sync gives Dynamo.
import type { KvEvent } from '../../fleet/events/types.js'
import type { PreparedRequest } from '../prepare.js'
import { Rng } from '../rng.js'
import type { Placement, ReplayRouter, RouterContext, RouterFactory } from '../routers.js'
import { KvEventIndex } from './kv-event-index.js'

export interface DynamoConfig {
  overlapScoreWeight: number
}

export const DYNAMO_DEFAULTS: DynamoConfig = { overlapScoreWeight: 1 }

/** Per lane (its replicas' shared context token): the workers' ActiveSequences the replicas sync. */
const synced = new WeakMap<object, ActiveSequences[]>()

export const dynamoKvSync: RouterFactory = {
  name: 'dynamo_kv:sync',
  source: "NVIDIA Dynamo KV router with router replica sync (replicas share their active sequences, modelled without delay), re-implemented",
  create: (ctx) => {
    let active = synced.get(ctx.replicaGroup)
    if (active === undefined) {
      active = ctx.engines.map(() => new ActiveSequences())
      synced.set(ctx.replicaGroup, active)
    }
    return new DynamoKv(ctx, DYNAMO_DEFAULTS, active)
  },
}

export const dynamoKv: RouterFactory = {
  name: 'dynamo_kv',
  source: 'NVIDIA Dynamo KV router (KV-event index, cost = overlap weight 1 × prefill blocks + decode blocks), re-implemented',
  create: (ctx) => new DynamoKv(ctx),
}

/** One worker's ActiveSequences: what the router has sent it and not yet seen finish. */
class ActiveSequences {
  /** Prefill tokens of requests still in prefill. */
  activeTokens = 0
  /** Distinct blocks of the active requests, with how many requests hold each. */
  readonly blocks = new Map<number, number>()

  newBlocks(keys: Float64Array): number {
    let n = 0
    for (let i = 0; i < keys.length; i++) if (!this.blocks.has(keys[i]!)) n++
    return n
  }

  add(keys: Float64Array, prefillTokens: number): void {
    this.activeTokens += prefillTokens
    for (let i = 0; i < keys.length; i++) this.blocks.set(keys[i]!, (this.blocks.get(keys[i]!) ?? 0) + 1)
  }

  prefillDone(prefillTokens: number): void {
    this.activeTokens -= prefillTokens
  }

  free(keys: Float64Array): void {
    for (let i = 0; i < keys.length; i++) {
      const n = this.blocks.get(keys[i]!)!
      if (n <= 1) this.blocks.delete(keys[i]!)
      else this.blocks.set(keys[i]!, n - 1)
    }
  }
}

export class DynamoKv implements ReplayRouter {
  readonly index: KvEventIndex
  private members: number[]
  private readonly active: ActiveSequences[]
  private readonly rng: Rng

  constructor(
    private readonly ctx: Pick<RouterContext, 'members' | 'model' | 'seed' | 'blockSize'> & { engines: readonly unknown[] },
    private readonly config: DynamoConfig = DYNAMO_DEFAULTS,
    active?: ActiveSequences[],
  ) {
    this.members = [...ctx.members]
    this.index = new KvEventIndex(ctx.engines.length, ctx.blockSize, 'dynamo')
    this.active = active ?? ctx.engines.map(() => new ActiveSequences())
    this.rng = new Rng(ctx.seed, 'dynamo_kv/ties')
  }

  readonly kvEvents = (instance: number, events: readonly KvEvent[]): void => {
    this.index.apply(instance, events, this.ctx.model)
  }

  route(req: PreparedRequest): Placement {
    const ids = req.prompt.tokenIds
    if (ids === undefined) throw new Error("dynamo_kv needs the prompts' token ids (prepare with tokens)")
    return this.routeTokens(ids, req.cacheSalt)
  }

  routeTokens(tokenIds: Uint32Array, salt?: string): Placement {
    return this.book(tokenIds, salt, this.choose(tokenIds, salt), true)
  }

  /** Per member, the request's leading blocks its indexed KV holds. */
  overlaps(tokenIds: Uint32Array, salt?: string): Map<number, number> {
    return this.index.longestPrefix(this.index.requestKeys(tokenIds, this.index.seed(this.ctx.model, salt)), this.members)
  }

  /** The worker the cost picks, without booking the request (what Dynamo's advisory peek does). */
  choose(tokenIds: Uint32Array, salt?: string): number {
    const bs = this.ctx.blockSize
    const isl = tokenIds.length
    const keys = this.index.requestKeys(tokenIds, this.index.seed(this.ctx.model, salt))
    const overlaps = this.index.longestPrefix(keys, this.members)
    let best = Infinity
    let ties: number[] = []
    for (const w of this.members) {
      const a = this.active[w]!
      const prefillBlocks = (Math.max(0, isl - overlaps.get(w)! * bs) + a.activeTokens) / bs
      const decodeBlocks = a.newBlocks(keys) + a.blocks.size
      const logit = this.config.overlapScoreWeight * prefillBlocks + decodeBlocks
      if (logit < best - 1e-5) {
        best = logit
        ties = [w]
      } else if (Math.abs(logit - best) < 1e-5) ties.push(w)
    }
    let chosen = ties[0]!
    if (ties.length > 1) {
      let smallest = Infinity
      let small: number[] = []
      for (const w of ties) {
        const s = this.index.size(w)
        if (s < smallest) {
          smallest = s
          small = [w]
        } else if (s === smallest) small.push(w)
      }
      chosen = small.length === 1 ? small[0]! : small[this.rng.int(small.length)]!
    }
    return chosen
  }

  /**
   * Books the request on `chosen` (add_request): its blocks until it ends and, with `prefills`,
   * its uncached prompt tokens until its first token; without (a decode leg whose KV comes from
   * a prefill worker), none.
   */
  book(tokenIds: Uint32Array, salt: string | undefined, chosen: number, prefills: boolean): Placement {
    const bs = this.ctx.blockSize
    const keys = this.index.requestKeys(tokenIds, this.index.seed(this.ctx.model, salt))
    const a = this.active[chosen]!
    const prefill = prefills ? Math.max(0, tokenIds.length - this.index.longestPrefix(keys, [chosen]).get(chosen)! * bs) : 0
    a.add(keys, prefill)
    let inPrefill = true
    let freed = false
    return {
      instance: chosen,
      overflow: null,
      firstToken: () => {
        if (!inPrefill || freed) return
        inPrefill = false
        a.prefillDone(prefill)
      },
      finish: () => {
        if (freed) return
        freed = true
        if (inPrefill) a.prefillDone(prefill)
        a.free(keys)
      },
    }
  }

  /** Worker `w`'s bookkeeping: prefill tokens in flight and distinct active blocks. */
  load(w: number): { activeTokens: number; activeBlocks: number } {
    return { activeTokens: this.active[w]!.activeTokens, activeBlocks: this.active[w]!.blocks.size }
  }

  setInstances(members: readonly number[]): void {
    this.members = [...members]
  }

  close(): void {}
}
