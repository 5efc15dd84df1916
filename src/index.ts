export { xxh3, xxh3Blocks } from './core/hash.js'
export { buildInfo, type BuildInfo } from './build-info.js'
export { Router, Lease, NoInstanceError, type PickOptions } from './core/router.js'
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
export { InvalidArgTypeError, OutOfRangeError } from './core/errors.js'
