// SGLang's model gateway in PD mode (sgl-project/sglang, sgl-model-gateway/src/routers/http/
// pd_router.rs and pd_router/selection.rs), re-implemented. Facts used:
//   pair      select_pd_pair: the prefill worker is picked by the prefill policy over the
//             prefill workers and the decode worker by the decode policy over the decode
//             workers, independently, each from the same request text (extract_text_for_routing);
//             no PD policy given (`--prefill-policy`/`--decode-policy` unset) means the router's
//             `--policy` for both: cache_aware with its defaults (the launch log prints
//             `prefill_policy: None, decode_policy: None | policy: CacheAware { cache_threshold:
//             0.3, balance_abs_threshold: 64, balance_rel_threshold: 1.5 … }`), one tree each;
//   always    every request runs both legs: the gateway has no decision to skip the prefill;
//   flow      execute_dual_dispatch_internal: both legs sent at once with the prefill worker's
//             bootstrap_host/bootstrap_port and a fresh bootstrap_room (the simulator's
//             submitBootstrap);
//   load      a WorkerLoadGuard on each of the two workers, dropped when the response ends: both
//             workers count the request in flight until the decode finishes.
// cache_aware itself is ./sglang-cache-aware.ts (cache_aware.rs, tree.rs).
import type { PdContext, PdPlacement, PdRouter, PdRouterFactory } from '../pd/types.js'
import type { PreparedRequest } from '../prepare.js'
import { SglangCacheAware, sglangText } from './sglang-cache-aware.js'

export const sglangPd: PdRouterFactory = {
  name: 'sglang_pd',
  source: 'SGLang model gateway PD mode (pd_router.rs select_pd_pair, cache_aware per pool, bootstrap flow), re-implemented',
  create: (ctx) => new SglangPd(ctx),
}

export class SglangPd implements PdRouter {
  readonly prefillPolicy: SglangCacheAware
  readonly decodePolicy: SglangCacheAware

  constructor(ctx: Pick<PdContext, 'prefill' | 'decode'>) {
    this.prefillPolicy = new SglangCacheAware(ctx.prefill)
    this.decodePolicy = new SglangCacheAware(ctx.decode)
  }

  route(req: PreparedRequest, now: number): PdPlacement {
    const text = sglangText(req)
    const p = this.prefillPolicy.routeText(text, now)
    const d = this.decodePolicy.routeText(text, now)
    return {
      prefill: p.instance,
      decode: d.instance,
      flow: 'bootstrap',
      finish: () => {
        p.finish()
        d.finish()
      },
    }
  }

  close(): void {}
}
