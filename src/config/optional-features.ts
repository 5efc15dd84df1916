// The optional packages (core/optional-packages.ts) a configuration needs, read from the
// configuration alone, so that a command looks for all of them at once before it starts
// anything (the demo fleet, a port): a missing one is neither found halfway through a start
// nor one per run. Each feature still looks for its own where it starts, for what a reload
// brings in.
import type { OptionalFeature } from '../core/optional-packages.js'
import type { Config } from './config.js'

export function featuresOf(config: Config): OptionalFeature[] {
  const out = new Set<OptionalFeature>()
  if (config.kvEvents !== undefined) out.add('kvEvents')
  for (const ep of config.endpoints) {
    if (ep.kvEvents !== undefined) out.add('kvEvents')
    if (ep.discovery?.some((s) => s.type === 'kubernetes' || s.type === 'inferencePool')) out.add('kubernetes')
  }
  if (config.shareLoad !== undefined) out.add('shareLoad')
  if (config.tokenizer?.mode === 'local') out.add('localTokenizer')
  if (config.tokenizer?.mode === 'o200k') out.add('o200k')
  return [...out]
}
