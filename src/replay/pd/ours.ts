// Our lanes of a disaggregated replay. `pd` and `pd_always` run src/schedule's pd profile over
// a RouterLegPicker, exactly as `serve` runs it over its endpoints: the native Router with
// longest_prefix, each instance in the leg groups of its role (routerMembers), decode first, the
// request whole on the decode instance when it lacks fewer prompt tokens than the threshold, or
// while the prefill pool has more queued within the decode prefill cap (`pd_always`: threshold
// and cap 0, every request split). `aggregated` is the same Router over a fleet
// of the same total size whose instances all do both legs (the single profile). Each also runs
// with the exact view (`pd:events`, `pd_always:events`, `aggregated:events`): the Router fed by
// the lane's engines' KV events and asked with the prompt's token ids, as serve is when it
// subscribes to vLLM's publishers (kvEvents) and tokenizes, so a decode instance's uncached
// tokens are what its engine really lacks rather than what was last sent there.
import { Router, type Lease } from '../../core/router.js'
import { LIMITS } from '../../core/options.js'
import { DEFAULT_PD_DECODE_PREFILL_CAP, DEFAULT_PD_THRESHOLD, type Role } from '../../config/disaggregation.js'
import { RouterLegPicker, routerMembers, type RoleMember } from '../../schedule/router-picker.js'
import { schedule, type RequestView } from '../../schedule/index.js'
import { BYTES_PER_TOKEN } from '../../sim/tokenizer.js'
import type { PreparedRequest } from '../prepare.js'
import { applyKvEvents, exactTokensOf, type ExactRefusals } from '../events-lane.js'
import type { PdContext, PdPlacement, PdRouter, PdRouterFactory } from './types.js'

export const AGGREGATED_LANE = 'aggregated'
export const PD_LANE = 'pd'
export const PD_ALWAYS_LANE = 'pd_always'
/** The suffix of our lanes with the exact view (fed by the engines' KV events). */
export const EVENTS_SUFFIX = ':events'

export type LaneView = 'approximate' | 'exact'

/**
 * Our pd profile with `threshold` (tokens the decode instance lacks below which the prefill leg
 * is skipped) and `cap` (serve's decodePrefillCap: the load-aware whole runs past it; 0 none).
 * Threshold 0 is `pd_always`: every request split, whatever the load.
 */
export function ourPd(
  threshold: number,
  cap = threshold === 0 ? 0 : DEFAULT_PD_DECODE_PREFILL_CAP,
  name = threshold === 0 && cap === 0 ? PD_ALWAYS_LANE : PD_LANE,
  view: LaneView = 'approximate',
): PdRouterFactory {
  return {
    name: view === 'exact' ? `${name}${EVENTS_SUFFIX}` : name,
    source: `prefix-router's pd profile (src/schedule, decode first, threshold ${threshold} tokens, decode prefill cap ${cap}) over the native Router, longest_prefix${view === 'exact' ? ", exact view from the engines' KV events" : ''}`,
    ...(view === 'exact' && { kvEvents: true }),
    create: (ctx) => new SchedulerLane(ctx, threshold, cap, view),
  }
}

export function aggregatedLane(view: LaneView = 'approximate'): PdRouterFactory {
  return {
    name: view === 'exact' ? `${AGGREGATED_LANE}${EVENTS_SUFFIX}` : AGGREGATED_LANE,
    source: `prefix-router longest_prefix over an aggregated fleet of the same total size${view === 'exact' ? ", exact view from the engines' KV events" : ''}`,
    aggregated: true,
    ...(view === 'exact' && { kvEvents: true }),
    create: (ctx) => new SchedulerLane(ctx, DEFAULT_PD_THRESHOLD, 0, view),
  }
}

export const aggregated: PdRouterFactory = aggregatedLane()

/** Our lanes in report order, `pd` with the given threshold and decode prefill cap, in one view. */
export function ourLanes(threshold = DEFAULT_PD_THRESHOLD, cap = DEFAULT_PD_DECODE_PREFILL_CAP, view: LaneView = 'approximate'): PdRouterFactory[] {
  return [aggregatedLane(view), ourPd(threshold, cap, PD_LANE, view), ourPd(0, 0, PD_ALWAYS_LANE, view)]
}

export class SchedulerLane implements PdRouter {
  readonly router: Router
  readonly picker: RouterLegPicker
  readonly #index = new Map<string, number>()
  /** What the exact view refused (the exact lanes: malformed or orphan events, none expected). */
  readonly refused: ExactRefusals = { malformed: 0, orphan: 0, notMember: 0, blockSize: 0, capacity: 0 }
  readonly kvEvents?: PdRouter['kvEvents']
  #now = 0

  constructor(
    private readonly ctx: PdContext,
    private readonly threshold: number,
    private readonly cap: number,
    private readonly view: LaneView = 'approximate',
  ) {
    // What serve gives longest_prefix from vllm:cache_config_info (as the aggregated lanes' NativeRouter).
    const indexBlocks = Math.max(1, Math.round((ctx.kvBlocks * ctx.blockSize * BYTES_PER_TOKEN) / LIMITS.blockSize.default))
    const members: RoleMember[] = []
    const role = (i: number): Role => (ctx.prefill.includes(i) ? 'prefill' : ctx.prefill.length === 0 ? 'both' : 'decode')
    for (const i of [...ctx.prefill, ...ctx.decode]) {
      members.push({ id: ctx.ids[i]!, role: role(i), indexBlocks })
      this.#index.set(ctx.ids[i]!, i)
    }
    const exact = view === 'exact'
    this.router = new Router({ strategy: 'longest_prefix', prefixLength: ctx.prefixLength, instances: routerMembers(members), ...(exact && { exactBlockSize: ctx.blockSize }) })
    this.picker = new RouterLegPicker(this.router, members, LIMITS.blockSize.default, exact ? () => this.#now : undefined)
    if (exact) {
      for (const m of members) this.router.exact.setView(m.id, 'fresh')
      this.kvEvents = (instance, events) => applyKvEvents(this.router, this.ctx.ids[instance]!, events, this.refused)
    }
  }

  route(req: PreparedRequest, now: number): PdPlacement {
    this.#now = now
    const view: RequestView = {
      key: req.text,
      tenant: req.tenant,
      model: undefined,
      anchor: req.anchor,
      exact: this.view === 'exact' ? exactTokensOf(req, PD_LANE + EVENTS_SUFFIX) : undefined,
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
