// Node's HTTP/1.1 server timeouts from the configuration's limits: the front port's and the
// admin port's alike.
import type http from 'node:http'
import type { Config } from '../config/config.js'

/**
 * How often connections are checked: for Node's HTTP/1.1 timeouts, which it checks only this
 * often (30 s by default), and for HTTP/2 sessions nghttp2 has finished with.
 */
export const checkingIntervalMs = (headersTimeoutMs: number): number => Math.max(50, Math.min(1000, Math.floor(headersTimeoutMs / 4) || 1000))

export function h1Options(config: Config): Pick<http.ServerOptions, 'headersTimeout' | 'requestTimeout' | 'keepAliveTimeout' | 'connectionsCheckingInterval'> {
  const { headersTimeoutMs, requestTimeoutMs, keepAliveTimeoutMs } = config.limits
  return {
    headersTimeout: headersTimeoutMs,
    requestTimeout: requestTimeoutMs,
    // Node holds an idle connection a second longer than it advertises (Keep-Alive: timeout=).
    keepAliveTimeout: keepAliveTimeoutMs,
    connectionsCheckingInterval: checkingIntervalMs(headersTimeoutMs),
  }
}
