export { xxh3, xxh3Blocks } from './hash.js'
export { buildInfo, type BuildInfo } from './build-info.js'
export { Router, Lease, NoInstanceError, type PickOptions } from './router.js'
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
} from './router-options.js'
export { InvalidArgTypeError, OutOfRangeError } from './errors.js'
