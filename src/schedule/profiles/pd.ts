// The pd profile: a prefill instance computes the prompt's KV cache, a decode instance receives
// it and generates. Decode first (by default): the decode instance is chosen by its load and the
// prefix it already holds, which is what need not be moved; then, when it lacks less of the
// prompt than the threshold, the request runs there whole, since moving a short remainder costs
// more than computing it; otherwise the prefill instance is chosen by the strategy over the
// prefill pool. Prefill first chooses the prefill instance by the prompt, then the decode one,
// with the same decision. Each leg's lease counts on the instance doing it: a decode instance
// that will receive the prompt computes none of it, so its queued prefill is given back at once.
// A decode instance already computing prompts (the queued prefill of the requests sent to it, at
// least the threshold's tokens besides this one's) does not take another, however short: every
// token of prefill it computes lengthens the decode steps of all its running requests, and
// waiting behind that backlog costs the request more than the prefill leg would. Past the
// threshold, a request still runs whole when the prefill pool is so much busier that its first
// token comes sooner from the decode instance, within a cap on what that instance has queued
// (runsWhole): a fixed split leaves the decode instances' compute idle while prompts queue at
// the prefill instances. With the exact view, what a decode instance lacks leaves out the blocks
// only pending there (lackingTokens): a split request's blocks are on their way, not held.
import type { DisaggregationConfig } from '../../config/disaggregation.js'
import { RequestError } from '../../core/errors.js'
import type { Chosen, LegPicker, RequestView, Schedule, SingleReason } from '../types.js'
import { uncachedTokens } from '../uncached.js'

export type PdOptions = Pick<DisaggregationConfig, 'order' | 'threshold' | 'whenNoPrefill'> & Partial<Pick<DisaggregationConfig, 'decodePrefillCap'>>

/** No prefill instance can take the request (none in rotation, or none serving its model). */
export function isNoPrefill(err: unknown): boolean {
  return err instanceof RequestError && err.code === 'no_prefill_instance'
}

/** The prefill pick, or undefined when none can take it and the configuration runs the request decode-only. */
function prefillOrNone<I>(picker: LegPicker<I>, view: RequestView, o: PdOptions): Chosen<I> | undefined {
  try {
    return picker.pick(view, 'prefill')
  } catch (err) {
    if (isNoPrefill(err) && o.whenNoPrefill === 'decode') return undefined
    throw err
  }
}

/**
 * What a prefill leg adds to the first token beyond the prompt's compute and transfer, in prompt
 * tokens: the prefill request's own API-server work (~20 ms) and the decode instance's first step
 * (~22 ms), ~40 ms at the ~37k prompt tokens a second of a Llama 3.1 70B on 8 H100s (the
 * simulator's p5 profile, src/sim/profiles.ts).
 */
export const SPLIT_COST_TOKENS = 1500

/**
 * What a token of prefill on the decode instance costs each request decoding there, against a
 * token of queueing it saves this request: the token lengthens one step of each of them (their
 * TPOT, spread over their output) where it would have lengthened this request's wait once. ¾:
 * chosen on the replay (docs/replay.md, "Disaggregated fleets: results"), where ½ gave lower TTFT
 * and more TPOT, and ¾ leaves TPOT at light load where the threshold alone had it.
 */
export const DECODE_STALL_WEIGHT = 0.75

/**
 * Whether the request runs whole on its decode instance, and why (undefined: it is split).
 * `short_uncached`: it lacks fewer than `threshold` tokens there and the instance has fewer than
 * `threshold` tokens of other prompts still to compute (its queued prefill less this request's
 * own, which its lease has just added). `prefill_busier`, with a `cap`, while prompts queue at
 * the prefill pool (its least-queued instance has more than the decode instance): whole, the
 * request waits for the decode instance's queued prefill and computes what it lacks; split, it
 * waits for the least-queued prefill instance's, moves what it lacks (a token moved costs about
 * what one computed does: 320 KB over ~12 GB/s against ~27 µs) and pays SPLIT_COST_TOKENS. The
 * gain, less the tokens computed on the decode instance times its other requests
 * (DECODE_STALL_WEIGHT each), must not be negative, and the instance's queued prefill with this
 * one's must stay within the cap: each token of it lengthens the decode steps of everything
 * running there. Prefill first, the prefill lease already counts this prompt: the least-queued
 * instance may look busier by it, which only matters when it is the one chosen.
 */
export function runsWhole<I>(picker: LegPicker<I>, decode: Chosen<I>, uncached: number, threshold: number, cap = 0): SingleReason | undefined {
  // Blocks round the lease's count of this prompt: never below none.
  const others = Math.max(0, picker.queuedPrefillTokens(decode.instance) - uncached)
  if (uncached < threshold && others < threshold) return 'short_uncached'
  if (cap === 0 || others + uncached > cap) return undefined
  // Only while prompts queue at the prefill pool: an idle fleet splits as the threshold says, and
  // one with no prefill instance is the prefill pick's to refuse (whenNoPrefill).
  const least = picker.leastQueuedPrefillTokens('prefill')
  if (least <= others || least === Infinity) return undefined
  const gain = least + SPLIT_COST_TOKENS - others
  const decoding = Math.max(1, picker.inFlight(decode.instance) - 1)
  return uncached * decoding * DECODE_STALL_WEIGHT <= gain ? 'prefill_busier' : undefined
}

/**
 * Tokens of the prompt the decode instance would compute were the request run whole there now:
 * what its pick saw missing or, with the exact view, what its engine has not reported holding
 * (`reported`, read before the pick), whichever is more. The exact view counts as held the
 * blocks routed to an instance whose events have not come yet (pendingMs): right for a request
 * run whole there, whose prefill stores them within its own first token, but a split request's
 * blocks reach its decode instance only when its prefill leg is done and they are moved, which
 * behind a busy prefill pool is seconds later. A request for the same prompt run whole there
 * meanwhile computes all of them again, each token stalling the decodes running there.
 */
export function lackingTokens<I>(picker: LegPicker<I>, decode: Chosen<I>, view: RequestView, reported: ((instance: I) => number) | undefined): number {
  const uncached = uncachedTokens(decode.lease, view, picker.blockTokens)
  // Only where the pick matched on the exact view: an instance whose events are not followed
  // (none yet, or lost) reports nothing, and its approximate match is all there is.
  if (reported === undefined || !decode.lease.exact) return uncached
  return Math.max(uncached, view.promptTokens - Math.min(view.promptTokens, reported(decode.instance)))
}

export function pd<I>(picker: LegPicker<I>, view: RequestView, o: PdOptions): Schedule<I> {
  if (o.order === 'prefill-first') return prefillFirst(picker, view, o)
  const reported = picker.reportedTokens?.(view)
  const decode = picker.pick(view, 'decode')
  const uncached = lackingTokens(picker, decode, view, reported)
  const whole = runsWhole(picker, decode, uncached, o.threshold, o.decodePrefillCap)
  if (whole !== undefined) return { profile: 'single', target: decode, reason: whole, uncachedTokens: uncached }
  let prefill: Chosen<I> | undefined
  try {
    prefill = prefillOrNone(picker, view, o)
  } catch (err) {
    decode.lease.release()
    throw err
  }
  if (prefill === undefined) return { profile: 'single', target: decode, reason: 'no_prefill_instance', uncachedTokens: uncached }
  decode.lease.firstToken()
  return { profile: 'pd', prefill, decode, uncachedTokens: uncached }
}

function prefillFirst<I>(picker: LegPicker<I>, view: RequestView, o: PdOptions): Schedule<I> {
  const prefill = prefillOrNone(picker, view, o)
  let decode: Chosen<I>
  let reported: ((instance: I) => number) | undefined
  try {
    reported = picker.reportedTokens?.(view)
    decode = picker.pick(view, 'decode')
  } catch (err) {
    prefill?.lease.release()
    throw err
  }
  const uncached = lackingTokens(picker, decode, view, reported)
  if (prefill === undefined) return { profile: 'single', target: decode, reason: 'no_prefill_instance', uncachedTokens: uncached }
  const whole = runsWhole(picker, decode, uncached, o.threshold, o.decodePrefillCap)
  if (whole !== undefined) {
    prefill.lease.release()
    return { profile: 'single', target: decode, reason: whole, uncachedTokens: uncached }
  }
  decode.lease.firstToken()
  return { profile: 'pd', prefill, decode, uncachedTokens: uncached }
}
