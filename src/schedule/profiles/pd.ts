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
// waiting behind that backlog costs the request more than the prefill leg would.
import type { DisaggregationConfig } from '../../config/disaggregation.js'
import { RequestError } from '../../core/errors.js'
import type { Chosen, LegPicker, RequestView, Schedule } from '../types.js'
import { uncachedTokens } from '../uncached.js'

export type PdOptions = Pick<DisaggregationConfig, 'order' | 'threshold' | 'whenNoPrefill'>

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
 * Whether the request runs whole on its decode instance: it lacks fewer than `threshold` tokens
 * there, and the instance has fewer than `threshold` tokens of other prompts still to compute
 * (its queued prefill less this request's own, which its lease has just added).
 */
export function runsWhole<I>(picker: LegPicker<I>, decode: Chosen<I>, uncached: number, threshold: number): boolean {
  if (uncached >= threshold) return false
  return picker.queuedPrefillTokens(decode.instance) - uncached < threshold
}

export function pd<I>(picker: LegPicker<I>, view: RequestView, o: PdOptions): Schedule<I> {
  if (o.order === 'prefill-first') return prefillFirst(picker, view, o)
  const decode = picker.pick(view, 'decode')
  const uncached = uncachedTokens(decode.lease, view, picker.blockTokens)
  if (runsWhole(picker, decode, uncached, o.threshold)) return { profile: 'single', target: decode, reason: 'short_uncached', uncachedTokens: uncached }
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
  try {
    decode = picker.pick(view, 'decode')
  } catch (err) {
    prefill?.lease.release()
    throw err
  }
  const uncached = uncachedTokens(decode.lease, view, picker.blockTokens)
  if (prefill === undefined) return { profile: 'single', target: decode, reason: 'no_prefill_instance', uncachedTokens: uncached }
  if (runsWhole(picker, decode, uncached, o.threshold)) {
    prefill.lease.release()
    return { profile: 'single', target: decode, reason: 'short_uncached', uncachedTokens: uncached }
  }
  decode.lease.firstToken()
  return { profile: 'pd', prefill, decode, uncachedTokens: uncached }
}
