// Strategy names a replay accepts: every native strategy the core lists (STRATEGIES in
// src/router-options.ts, read at run time) and the peers' re-implementations.
import { longestPrefixEvents } from './events-lane.js'
import { dynamoKv } from './peers/dynamo-kv.js'
import { llmdDefault } from './peers/llmd-default.js'
import { llmdPrecise } from './peers/llmd-precise.js'
import { sglangCacheAware } from './peers/sglang-cache-aware.js'
import { stackPrefixAware } from './peers/stack-prefixaware.js'
import { nativeFactory, nativeStrategies, type RouterFactory } from './routers.js'
import { OutOfRangeError } from '../core/errors.js'

export const PEERS: readonly RouterFactory[] = [sglangCacheAware, llmdDefault, stackPrefixAware]

/**
 * Routers fed by the engines' KV events: each needs every prompt's token ids and an event
 * stream per engine, so they run when named, not by default (the default run compares the
 * routers that see only requests, as `serve` without an event source does).
 */
export const EVENT_FED: readonly RouterFactory[] = [longestPrefixEvents, llmdPrecise, dynamoKv]

/** All names, natives first, in report order. */
export function strategyNames(): string[] {
  const [ours, ...peers] = EVENT_FED
  return [...nativeStrategies(), ours!.name, ...PEERS.map((p) => p.name), ...peers.map((p) => p.name)]
}

/** The strategies a replay runs when none are named: all but the event-fed ones. */
export function defaultStrategyNames(): string[] {
  return [...nativeStrategies(), ...PEERS.map((p) => p.name)]
}

/** Names in any case, with - or _; throws a RangeError naming the unknown one. */
export function resolveStrategies(names?: readonly string[]): RouterFactory[] {
  const all = strategyNames()
  const wanted = names === undefined || names.length === 0 ? defaultStrategyNames() : names.map((n) => n.trim().toLowerCase().replace(/-/g, '_'))
  const out: RouterFactory[] = []
  for (const n of wanted) {
    if (!all.includes(n)) throw new OutOfRangeError('strategy', `one of ${all.join(', ')}`, n, `unknown strategy '${n}'; choose from ${all.join(', ')}`)
    if (out.some((f) => f.name === n)) continue
    out.push([...PEERS, ...EVENT_FED].find((p) => p.name === n) ?? nativeFactory(n))
  }
  return out
}
