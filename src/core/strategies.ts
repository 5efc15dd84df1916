// What each routing strategy needs and does, as the native core's registry describes it
// (StrategyTraits, native/strategy/strategy.h): every layer asks these instead of comparing
// strategy names, so a strategy added there (one file and a registry line) is served, keyed,
// reported and documented by the rest with no second list to keep.
import { OutOfRangeError } from './errors.js'
import { native, type NativeStrategyInfo } from './native.js'

export type StrategyInfo = Readonly<NativeStrategyInfo>

/** Every strategy of the core, in the registry's order. */
export const STRATEGY_INFO: readonly StrategyInfo[] = native.strategies().map((s) => Object.freeze(s))

const BY_NAME = new Map(STRATEGY_INFO.map((s) => [s.name, s]))

/** A strategy's traits by its (parsed) name; throws for a name the core does not list. */
export function strategyInfo(name: string): StrategyInfo {
  const s = BY_NAME.get(name)
  if (s === undefined) throw new OutOfRangeError('strategy', `one of ${STRATEGY_INFO.map((i) => i.name).join(', ')}`, name)
  return s
}

/**
 * What a pick was, as the x-prefix-router-decision header, the access log and `route` say it:
 * `target` or `overflow` for a strategy with a target of its own, else the strategy's name.
 */
export function decisionOf(strategy: string, overflow: boolean): string {
  return strategyInfo(strategy).targeted ? (overflow ? 'overflow' : 'target') : strategy
}
