// The workload generators by name (`--workload NAME`).
import type { Workload } from '../types.js'
import { cachePressure } from './cache-pressure.js'
import { conversations } from './conversations.js'
import { longContext } from './long-context.js'
import { sharedPrefix } from './shared-prefix.js'
import { tenants } from './tenants.js'

export const WORKLOADS: Readonly<Record<string, Workload>> = {
  [longContext.name]: longContext,
  [conversations.name]: conversations,
  [sharedPrefix.name]: sharedPrefix,
  [tenants.name]: tenants,
  [cachePressure.name]: cachePressure,
}
