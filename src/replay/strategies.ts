// Strategy names a replay accepts: every native strategy the core lists (STRATEGIES in
// src/core/options.ts, read at run time) and the peers' re-implementations.
import { longestPrefixEvents, longestPrefixShared } from './events-lane.js'
import { dynamoKv, dynamoKvSync } from './peers/dynamo-kv.js'
import { llmdDefault } from './peers/llmd-default.js'
import { llmdPrecise } from './peers/llmd-precise.js'
import { sglangCacheAware } from './peers/sglang-cache-aware.js'
import { stackPrefixAware } from './peers/stack-prefixaware.js'
import { nativeFactory, nativeStrategies, type RouterFactory } from './routers.js'
import { OutOfRangeError } from '../core/errors.js'
import type { RoutingParams } from '../core/options.js'

export const PEERS: readonly RouterFactory[] = [sglangCacheAware, llmdDefault, stackPrefixAware]

/** Our lanes fed by the engines' KV events, and the peers that are. */
const OURS_EVENT_FED: readonly RouterFactory[] = [longestPrefixEvents, longestPrefixShared]
const PEERS_EVENT_FED: readonly RouterFactory[] = [llmdPrecise, dynamoKv, dynamoKvSync]

/**
 * Routers fed by the engines' KV events: each needs every prompt's token ids and an event
 * stream per engine. One router runs them when named (the default run compares the routers
 * that see only requests, as `serve` without an event source does); router replicas run them
 * by default, as the configuration that replicas need.
 */
export const EVENT_FED: readonly RouterFactory[] = [...OURS_EVENT_FED, ...PEERS_EVENT_FED]

/** All names, natives first, in report order. */
export function strategyNames(): string[] {
  return [...nativeStrategies(), ...OURS_EVENT_FED.map((p) => p.name), ...PEERS.map((p) => p.name), ...PEERS_EVENT_FED.map((p) => p.name)]
}

/**
 * The strategies a replay runs when none are named: with one router all but the event-fed
 * ones; with router replicas all of them.
 */
export function defaultStrategyNames(replicas = 1): string[] {
  return replicas > 1 ? strategyNames() : [...nativeStrategies(), ...PEERS.map((p) => p.name)]
}

/** Names in any case, with - or _; throws a RangeError naming the unknown one. */
export function resolveStrategies(names?: readonly string[], replicas = 1, native: RoutingParams = {}): RouterFactory[] {
  const all = strategyNames()
  const wanted = names === undefined || names.length === 0 ? defaultStrategyNames(replicas) : names.map((n) => n.trim().toLowerCase().replace(/-/g, '_'))
  const out: RouterFactory[] = []
  for (const n of wanted) {
    if (!all.includes(n)) throw new OutOfRangeError('strategy', `one of ${all.join(', ')}`, n, `unknown strategy '${n}'; choose from ${all.join(', ')}`)
    if (out.some((f) => f.name === n)) continue
    out.push([...PEERS, ...EVENT_FED].find((p) => p.name === n) ?? nativeFactory(n, native))
  }
  return out
}
