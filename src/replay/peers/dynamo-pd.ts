// NVIDIA Dynamo's conditional disaggregation (ai-dynamo/dynamo), re-implemented. Facts used:
//   order     lib/llm/src/kv_router/prefill_router/conditional_bypass.rs,
//             select_decode_worker_for_conditional_disagg: the decode router (a KV router over
//             the decode workers) is asked which worker it would pick and its overlap; the
//             policy then decides whether to skip the remote prefill and run the request whole
//             on that decode worker; otherwise the prefill router (a KV router over the prefill
//             workers) picks the prefill worker;
//   policy    lib/kv-router/src/conditional_disagg.rs, IslBoundingPolicy (the default
//             ConditionalDisaggPolicyKind): eff_isl = prompt_tokens − overlap_blocks × block_size;
//             bypass when eff_isl < 2,048 (DEFAULT_CONDITIONAL_DISAGG_EFF_ISL_THRESHOLD) and
//             eff_isl / max(prompt_tokens, 1) < 0.7 (…_EFF_ISL_RATIO_THRESHOLD); no decode-busy
//             gate unless configured (decode_gate_allows_bypass);
//   routers   each pool's KV router is ./dynamo-kv.ts (KV-event index, cost = overlap weight 1 ×
//             prefill blocks + decode blocks, its active-sequence bookkeeping);
//   flow      the prefill worker computes and the decode worker pulls the blocks (NIXL: prefill,
//             then decode).
// Simplifications: the decode worker is the one the peek chose (Dynamo's decode router picks
// again after the prefill, by the same cost); on a split request the decode worker's booking
// carries no prefill tokens (it computes none), its blocks until the request ends.
import type { KvEvent } from '../../fleet/events/types.js'
import type { PdContext, PdPlacement, PdRouter, PdRouterFactory } from '../pd/types.js'
import type { PreparedRequest } from '../prepare.js'
import { DynamoKv } from './dynamo-kv.js'

export const DYNAMO_EFF_ISL_THRESHOLD = 2048
export const DYNAMO_EFF_ISL_RATIO_THRESHOLD = 0.7

export const dynamoPd: PdRouterFactory = {
  name: 'dynamo_pd',
  source: 'NVIDIA Dynamo conditional disaggregation (isl_bounding 2,048 / 0.7, KV routers per pool), re-implemented',
  kvEvents: true,
  create: (ctx) => new DynamoPd(ctx),
}

/** IslBoundingPolicy.should_bypass_remote_prefill with the defaults. */
export function islBoundingBypass(promptTokens: number, overlapBlocks: number, blockSize: number): boolean {
  const eff = Math.max(0, promptTokens - overlapBlocks * blockSize)
  if (eff >= DYNAMO_EFF_ISL_THRESHOLD) return false
  return eff / Math.max(promptTokens, 1) < DYNAMO_EFF_ISL_RATIO_THRESHOLD
}

export class DynamoPd implements PdRouter {
  readonly decodeRouter: DynamoKv
  readonly prefillRouter: DynamoKv

  constructor(private readonly ctx: Pick<PdContext, 'prefill' | 'decode' | 'model' | 'seed' | 'blockSize'> & { engines: readonly unknown[] }) {
    this.decodeRouter = new DynamoKv({ members: ctx.decode, engines: ctx.engines, model: ctx.model, seed: ctx.seed, blockSize: ctx.blockSize })
    this.prefillRouter = new DynamoKv({ members: ctx.prefill, engines: ctx.engines, model: ctx.model, seed: ctx.seed + 1, blockSize: ctx.blockSize })
  }

  readonly kvEvents = (instance: number, events: readonly KvEvent[]): void => {
    this.decodeRouter.kvEvents(instance, events)
    this.prefillRouter.kvEvents(instance, events)
  }

  route(req: PreparedRequest): PdPlacement {
    const ids = req.prompt.tokenIds
    if (ids === undefined) throw new Error("dynamo_pd needs the prompts' token ids (prepare with tokens)")
    const overlaps = this.decodeRouter.overlaps(ids, req.cacheSalt)
    const decodeWorker = this.decodeRouter.choose(ids, req.cacheSalt)
    if (islBoundingBypass(ids.length, overlaps.get(decodeWorker) ?? 0, this.ctx.blockSize)) {
      const d = this.decodeRouter.book(ids, req.cacheSalt, decodeWorker, true)
      return { decode: d.instance, prefill: null, flow: 'nixl', firstToken: () => d.firstToken?.(), finish: () => d.finish() }
    }
    const p = this.prefillRouter.routeTokens(ids, req.cacheSalt)
    const d = this.decodeRouter.book(ids, req.cacheSalt, decodeWorker, false)
    return {
      decode: d.instance,
      prefill: p.instance,
      flow: 'nixl',
      prefillDone: () => p.finish(),
      finish: () => {
        p.finish()
        d.finish()
      },
    }
  }

  close(): void {}
}
