// How many client connections the front door may hold. Every socket is a file descriptor, and
// when the process runs out of them accept() fails for everyone: the admin port and the
// connections to the instances as well. The front gets what is left after those.
import { readFileSync } from 'node:fs'

/** Assumed where /proc/self/limits cannot be read (not Linux): Linux's usual default soft limit. */
export const FALLBACK_FD_LIMIT = 1024
/** The admin port's own connection cap, so a flood on the front never locks operators out. */
export const ADMIN_MAX_CONNECTIONS = 32
/** Health probe plus model or metrics discovery, which can overlap, per instance. */
export const PROBE_FDS_PER_INSTANCE = 2
/** stdio, listening sockets, epoll and libuv's own descriptors, log and config files. */
export const RESERVED_FDS = 64

/** The soft "Max open files" from a /proc/<pid>/limits text; undefined if absent. */
export function parseSoftFdLimit(limits: string): number | undefined {
  const m = /^Max open files\s+(\S+)/m.exec(limits)
  if (!m) return undefined
  if (m[1] === 'unlimited') return Number.MAX_SAFE_INTEGER
  const n = Number(m[1])
  return Number.isInteger(n) && n > 0 ? n : undefined
}

/** The process's soft descriptor limit (Node raises it to the hard limit at start-up). */
export function softFdLimit(read: () => string = () => readFileSync('/proc/self/limits', 'utf8')): number {
  try {
    return parseSoftFdLimit(read()) ?? FALLBACK_FD_LIMIT
  } catch {
    return FALLBACK_FD_LIMIT
  }
}

/**
 * What the front's share depends on, in numbers (config/fd-needs.ts reads them from the
 * configuration): the instances of every endpoint, the connection pool to each, and
 * limits.maxConnections when set.
 */
export interface DescriptorNeeds {
  instances: number
  connectionsPerInstance: number
  maxConnections?: number | undefined
}

/** Descriptors the router needs besides front connections: instances, probes, admin, files. */
export function reservedFds(needs: Pick<DescriptorNeeds, 'instances' | 'connectionsPerInstance'>): number {
  return needs.instances * (needs.connectionsPerInstance + PROBE_FDS_PER_INSTANCE) + ADMIN_MAX_CONNECTIONS + RESERVED_FDS
}

/**
 * Front connections allowed at once: limits.maxConnections if set, else the descriptor limit
 * less what reservedFds needs. When the instances alone could use up the limit the front still
 * gets a quarter of it: the pools are sized for peak fan-out and rarely all open at once.
 */
export function frontMaxConnections(needs: DescriptorNeeds, fdLimit: number = softFdLimit()): number {
  if (needs.maxConnections !== undefined) return needs.maxConnections
  const left = fdLimit - reservedFds(needs)
  return Math.min(1 << 20, Math.max(1, Math.floor(fdLimit / 4), left))
}
