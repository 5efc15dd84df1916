// The single profile: one pick, the whole request on it (every fleet that does not disaggregate).
import type { LegPicker, RequestView, Schedule } from '../types.js'

export function single<I>(picker: LegPicker<I>, view: RequestView): Schedule<I> {
  return { profile: 'single', target: picker.pick(view, undefined), reason: 'aggregated', uncachedTokens: undefined }
}
