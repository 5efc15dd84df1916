// Hash ids as a trace release assigns them: a new id for every block whose content (or
// anything before it) has not been seen, the next integer each time.
import type { Rng } from '../rng.js'

export class IdCounter {
  constructor(private next = 0) {}

  take(n: number): number[] {
    const out = new Array<number>(n)
    for (let i = 0; i < n; i++) out[i] = this.next++
    return out
  }
}

/**
 * The ids of a prompt of `tokens` tokens that continues an earlier prompt (`prevIds`, of
 * `prevTokens` tokens): the earlier prompt's full blocks are kept, and everything after
 * them is new, including the block that was partial, since its content now goes on.
 */
export function extend(prevIds: readonly number[], prevTokens: number, tokens: number, blockTokens: number, ids: IdCounter): number[] {
  const kept = Math.min(Math.floor(prevTokens / blockTokens), prevIds.length)
  return [...prevIds.slice(0, kept), ...ids.take(Math.ceil(tokens / blockTokens) - kept)]
}

/** Log-normal with the given mean (not median), rounded and clamped to [lo, hi]. */
export function lognormalTokens(rng: Rng, mean: number, sigma: number, lo: number, hi: number): number {
  const v = Math.round(rng.lognormal(mean / Math.exp((sigma * sigma) / 2), sigma))
  return v < lo ? lo : v > hi ? hi : v
}
