export { xxh3, xxh3Blocks } from './core/hash.js'
export { buildInfo, type BuildInfo } from './core/build-info.js'
export {
  Router,
  Lease,
  EXACT_ORPHAN,
  EXACT_NOT_MEMBER,
  EXACT_BLOCK_SIZE,
  EXACT_CAPACITY,
  type PickOptions,
  type SharedRouterOptions,
  type ExactTokens,
  type ExactView,
  type ExactInstanceInfo,
  type ExactMatchInfo,
  type ExactIndex,
} from './core/router.js'
export { exactSeed } from './core/exact-seed.js'
export {
  STRATEGIES,
  PLACEMENTS,
  LIMITS,
  parseStrategy,
  type Strategy,
  type Placement,
  type InstanceSpec,
  type RouterOptions,
  type RoutingParams,
  type ResolvedParams,
} from './core/options.js'
export { STRATEGY_INFO, strategyInfo, type StrategyInfo } from './core/strategies.js'
export {
  PrefixRouterError,
  InvalidArgTypeError,
  OutOfRangeError,
  NoInstanceError,
  RouterClosedError,
  SharedRouterError,
  RequestError,
  type PrefixRouterErrorOptions,
} from './core/errors.js'
export {
  routingKey,
  TENANT_HEADER,
  type RoutingApi,
  type RoutingKey,
  type RoutingKeyOptions,
  type TextRoutingKey,
  type BytesRoutingKey,
} from './core/key/index.js'
