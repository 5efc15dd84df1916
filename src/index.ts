export { xxh3, xxh3Blocks } from './core/hash.js'
export { buildInfo, type BuildInfo } from './build-info.js'
export { Router, Lease, type PickOptions, type SharedRouterOptions } from './core/router.js'
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
