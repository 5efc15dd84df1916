export { schedule, releaseSchedule } from './scheduler.js'
export { pd, isNoPrefill, type PdOptions } from './profiles/pd.js'
export { single } from './profiles/single.js'
export { uncachedTokens, APPROX_BYTES_PER_TOKEN } from './uncached.js'
export type { Chosen, LegPicker, RequestView, Schedule, SingleReason } from './types.js'

/** The APIs whose requests have a prompt to prefill and an answer to decode: the ones a disaggregated endpoint splits. */
export function disaggregates(api: string | undefined): boolean {
  return api === 'chat' || api === 'completions' || api === 'responses'
}
