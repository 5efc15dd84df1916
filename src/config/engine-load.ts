// Load from the engines: how often each instance's /metrics is read, and what for. One
// constant holds the interval's default, which the flag's help, the schema and the README
// all say.
import { z } from 'zod'
import { strategyInfo } from '../core/strategies.js'

/** Default time between two reads of an instance's /metrics. */
export const ENGINE_LOAD_INTERVAL_MS = 100
/** Bounds of the interval: below 10 ms the scrapes cost more than they tell; above a minute the figure is history. */
export const ENGINE_LOAD_INTERVAL = { min: 10, max: 60_000 } as const
/** A scrape unanswered for this many intervals is late: the instance falls back to this router's own counts. */
export const STALE_INTERVALS = 3
/** An instance whose /metrics is not vLLM's is read this rarely (it may be replaced by one that is). */
export const NOT_VLLM_INTERVAL_MS = 30_000

/**
 * auto: read the engines and feed longest_prefix (the strategy that weighs load by cost);
 * on: also count every client's requests in least_outstanding_requests and prefix_aware's
 * threshold (routing engineLoadAll); off: read nothing.
 */
export const ENGINE_LOAD_MODES = ['auto', 'on', 'off'] as const
export type EngineLoadMode = (typeof ENGINE_LOAD_MODES)[number]

const interval = z
  .number()
  .refine((v) => Number.isInteger(v) && v >= ENGINE_LOAD_INTERVAL.min && v <= ENGINE_LOAD_INTERVAL.max, {
    message: `must be a whole number of ms from ${ENGINE_LOAD_INTERVAL.min} to ${ENGINE_LOAD_INTERVAL.max}`,
  })

export const EngineLoadSchema = z
  .object({
    mode: z.enum(ENGINE_LOAD_MODES).default('auto'),
    intervalMs: interval.default(ENGINE_LOAD_INTERVAL_MS),
    /** No answer within this long: the scrape is late (default STALE_INTERVALS intervals). */
    staleAfterMs: z.number().int().min(1).max(10 * 60_000).optional(),
  })
  .strict()

export type EngineLoadConfig = z.infer<typeof EngineLoadSchema>

/** The scrape's time bound: staleAfterMs, else STALE_INTERVALS intervals. */
export function staleAfter(c: EngineLoadConfig): number {
  return c.staleAfterMs ?? STALE_INTERVALS * c.intervalMs
}

/** Whether an endpoint routing with `strategy` reads its engines: with auto, if the strategy weighs what they report. */
export function scrapes(c: EngineLoadConfig, strategy: string): boolean {
  return c.mode === 'on' || (c.mode === 'auto' && strategyInfo(strategy).engineLoad)
}
