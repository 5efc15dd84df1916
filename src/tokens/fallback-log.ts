// The exact view's tokenizer falling back, said in the log: at most one line every interval,
// with the count and reasons since the last line and the last one's words (which name the
// instance that answered). A line per request would let one hostile instance fill the log.
import type { Logger } from 'pino'
import type { FallbackReason, RequestTokenizer } from './types.js'

export const FALLBACK_LOG_EVERY_MS = 10_000

/** Starts watching `tokenizer`'s fallbacks; the function returned stops it. */
export function logFallbacks(tokenizer: RequestTokenizer, log: Logger, everyMs = FALLBACK_LOG_EVERY_MS): () => void {
  let seen: Partial<Record<FallbackReason, number>> = tokenizer.stats().fallbacks
  const timer = setInterval(() => {
    const s = tokenizer.stats()
    const since: Partial<Record<FallbackReason, number>> = {}
    let n = 0
    for (const [reason, count] of Object.entries(s.fallbacks) as [FallbackReason, number][]) {
      const d = count - (seen[reason] ?? 0)
      if (d > 0) {
        since[reason] = d
        n += d
      }
    }
    seen = s.fallbacks
    if (n > 0) log.warn({ mode: tokenizer.mode, fallbacks: since, last: s.lastFailure }, `the exact view's tokenizer gave no ids for ${n} request(s) in the last ${everyMs / 1000} s; they were routed on the approximate view`)
  }, everyMs)
  timer.unref()
  return () => clearInterval(timer)
}
