// The numbers the front's connection cap is worked out from (net/fd-limit.ts), as the
// configuration gives them: net/ takes numbers, not the configuration's shape.
import type { Config } from './config.js'

export function descriptorNeeds(config: Pick<Config, 'endpoints' | 'upstream' | 'limits'>): {
  instances: number
  connectionsPerInstance: number
  maxConnections: number | undefined
} {
  return {
    instances: config.endpoints.reduce((n, ep) => n + ep.instances.length, 0),
    connectionsPerInstance: config.upstream.connections,
    maxConnections: config.limits.maxConnections,
  }
}
