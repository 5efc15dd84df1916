// Our lanes of a disaggregated replay. `pd` and `pd_always` run src/schedule's pd profile over
// a RouterLegPicker, exactly as `serve` runs it over its endpoints: the native Router with
// longest_prefix, each instance in the leg groups of its role (routerMembers), decode first, the
// request whole on the decode instance when it lacks fewer prompt tokens than the threshold, or
// while the prefill pool has more queued within the decode prefill cap (`pd_always`: threshold
// and cap 0, every request split). `aggregated` is the same Router over a fleet
// of the same total size whose instances all do both legs (the single profile).
import { Router, type Lease } from '../../core/router.js'
import { LIMITS } from '../../core/options.js'
import { DEFAULT_PD_DECODE_PREFILL_CAP, DEFAULT_PD_THRESHOLD, type Role } from '../../config/disaggregation.js'
import { RouterLegPicker, routerMembers, type RoleMember } from '../../schedule/router-picker.js'
import { schedule, type RequestView } from '../../schedule/index.js'
import { BYTES_PER_TOKEN } from '../../sim/tokenizer.js'
import type { PreparedRequest } from '../prepare.js'
import type { PdContext, PdPlacement, PdRouter, PdRouterFactory } from './types.js'

export const AGGREGATED_LANE = 'aggregated'
export const PD_LANE = 'pd'
export const PD_ALWAYS_LANE = 'pd_always'

/**
 * Our pd profile with `threshold` (tokens the decode instance lacks below which the prefill leg
 * is skipped) and `cap` (serve's decodePrefillCap: the load-aware whole runs past it; 0 none).
 * Threshold 0 is `pd_always`: every request split, whatever the load.
 */
export function ourPd(threshold: number, cap = threshold === 0 ? 0 : DEFAULT_PD_DECODE_PREFILL_CAP, name = threshold === 0 && cap === 0 ? PD_ALWAYS_LANE : PD_LANE): PdRouterFactory {
  return {
    name,
    source: `prefix-router's pd profile (src/schedule, decode first, threshold ${threshold} tokens, decode prefill cap ${cap}) over the native Router, longest_prefix`,
    create: (ctx) => new SchedulerLane(ctx, threshold, cap),
  }
}

export const aggregated: PdRouterFactory = {
  name: AGGREGATED_LANE,
  source: 'prefix-router longest_prefix over an aggregated fleet of the same total size',
  aggregated: true,
  create: (ctx) => new SchedulerLane(ctx, DEFAULT_PD_THRESHOLD, 0),
}

/** Our lanes in report order, `pd` with the given threshold and decode prefill cap. */
export function ourLanes(threshold = DEFAULT_PD_THRESHOLD, cap = DEFAULT_PD_DECODE_PREFILL_CAP): PdRouterFactory[] {
  return [aggregated, ourPd(threshold, cap, PD_LANE), ourPd(0, 0)]
}

export class SchedulerLane implements PdRouter {
  readonly router: Router
  readonly picker: RouterLegPicker
  readonly #index = new Map<string, number>()

  constructor(
    ctx: PdContext,
    private readonly threshold: number,
    private readonly cap: number,
  ) {
    // What serve gives longest_prefix from vllm:cache_config_info (as the aggregated lanes' NativeRouter).
    const indexBlocks = Math.max(1, Math.round((ctx.kvBlocks * ctx.blockSize * BYTES_PER_TOKEN) / LIMITS.blockSize.default))
    const members: RoleMember[] = []
    const role = (i: number): Role => (ctx.prefill.includes(i) ? 'prefill' : ctx.prefill.length === 0 ? 'both' : 'decode')
    for (const i of [...ctx.prefill, ...ctx.decode]) {
      members.push({ id: ctx.ids[i]!, role: role(i), indexBlocks })
      this.#index.set(ctx.ids[i]!, i)
    }
    this.router = new Router({ strategy: 'longest_prefix', prefixLength: ctx.prefixLength, instances: routerMembers(members) })
    this.picker = new RouterLegPicker(this.router, members, LIMITS.blockSize.default)
  }

  route(req: PreparedRequest): PdPlacement {
    const view: RequestView = {
      key: req.text,
      tenant: req.tenant,
      model: undefined,
      anchor: req.anchor,
      exact: undefined,
      promptTokens: req.prompt.promptTokens,
    }
    const s = schedule(this.picker, view, { order: 'decode-first', threshold: this.threshold, whenNoPrefill: 'decode', decodePrefillCap: this.cap })
    if (s.profile === 'single') return this.whole(s.target.lease)
    const prefill = s.prefill.lease
    const decode = s.decode.lease
    return {
      decode: this.#index.get(decode.instance)!,
      prefill: this.#index.get(prefill.instance)!,
      flow: 'nixl',
      // The prefill leg's request ends with its one-token answer: its lease with it.
      prefillDone: () => prefill.release(),
      finish: () => {
        prefill.release()
        decode.release()
      },
    }
  }

  private whole(lease: Lease): PdPlacement {
    return { decode: this.#index.get(lease.instance)!, prefill: null, flow: 'nixl', firstToken: () => lease.firstToken(), finish: () => lease.release() }
  }

  close(): void {
    this.router.close()
  }
}
