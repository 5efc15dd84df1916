// vLLM router's PD mode (vllm-project/router, src/routers/http/vllm_pd_router.rs), with the
// policy its README's disaggregation example runs (`--policy consistent_hash
// --vllm-pd-disaggregation --prefill … --decode …`), re-implemented. Facts used:
//   pair      select_worker_with_policy: the prefill worker by the prefill policy over the
//             prefill instances, the decode worker by the decode policy over the decode ones,
//             independently (no per-leg policy given: `--policy` for both);
//   always    every request runs both legs;
//   flow      process_vllm_two_stage_request: the prefill leg with max_tokens 1, stream false
//             and kv_transfer_params {do_remote_decode: true}, then the decode leg with the
//             returned kv_transfer_params (NIXL: prefill, then decode);
//   policy    docs/load_balancing/README.md, consistent_hash: the key is the first of the
//             X-Session-ID, X-User-ID, X-Tenant-ID, X-Request-ID, X-Correlation-ID, X-Trace-ID
//             headers, then the body's session_params.session_id, user, session_id, user_id,
//             else a hash of the whole body; 160 virtual nodes per worker on the ring; no load.
// Simplifications: XXH3 for the ring's hashes; the replay's requests carry none of those
// headers (a tenant is sent as X-Amzn-SageMaker-Prefix-Aware-Id, which the policy does not read),
// so the body's fields or its hash decide.
import { xxh3 } from '../../core/hash.js'
import type { PdContext, PdPlacement, PdRouter, PdRouterFactory } from '../pd/types.js'
import type { PreparedRequest } from '../prepare.js'

export const VIRTUAL_NODES = 160

export const vllmPd: PdRouterFactory = {
  name: 'vllm_pd',
  source: 'vLLM router --vllm-pd-disaggregation with --policy consistent_hash (vllm_pd_router.rs), re-implemented',
  create: (ctx) => new VllmPd(ctx),
}

/** A consistent-hash ring over some workers: VIRTUAL_NODES points each. */
export class HashRing {
  private readonly points: bigint[] = []
  private readonly owners: number[] = []

  constructor(ids: readonly string[], workers: readonly number[]) {
    const pts: { h: bigint; w: number }[] = []
    for (const w of workers) for (let v = 0; v < VIRTUAL_NODES; v++) pts.push({ h: xxh3(`${ids[w]}-${v}`), w })
    pts.sort((a, b) => (a.h < b.h ? -1 : a.h > b.h ? 1 : 0))
    for (const p of pts) {
      this.points.push(p.h)
      this.owners.push(p.w)
    }
  }

  /** The worker owning the first point at or after the key's hash (wrapping). */
  pick(key: string): number {
    const h = xxh3(key)
    let lo = 0
    let hi = this.points.length
    while (lo < hi) {
      const mid = (lo + hi) >> 1
      if (this.points[mid]! < h) lo = mid + 1
      else hi = mid
    }
    return this.owners[lo === this.points.length ? 0 : lo]!
  }
}

/** consistent_hash's key from the body (the replay sends none of the headers it reads). */
export function consistentHashKey(body: Readonly<Record<string, unknown>>): string {
  const sp = body.session_params
  if (sp !== null && typeof sp === 'object' && typeof (sp as { session_id?: unknown }).session_id === 'string') return (sp as { session_id: string }).session_id
  for (const k of ['user', 'session_id', 'user_id']) if (typeof body[k] === 'string') return body[k] as string
  return JSON.stringify(body)
}

export class VllmPd implements PdRouter {
  readonly prefillRing: HashRing
  readonly decodeRing: HashRing

  constructor(ctx: Pick<PdContext, 'ids' | 'prefill' | 'decode'>) {
    this.prefillRing = new HashRing(ctx.ids, ctx.prefill)
    this.decodeRing = new HashRing(ctx.ids, ctx.decode)
  }

  route(req: PreparedRequest): PdPlacement {
    const key = consistentHashKey(req.body)
    return { prefill: this.prefillRing.pick(key), decode: this.decodeRing.pick(key), flow: 'nixl', finish: () => {} }
  }

  close(): void {}
}
