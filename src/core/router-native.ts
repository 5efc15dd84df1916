// What a Router hands its native state on the cold paths: the routing parameters as
// router_configure's named options (and back from router_params), where the shared state
// lives, and the shared-state errors as SharedRouterError.
import { existsSync } from 'node:fs'
import { tmpdir } from 'node:os'
import { InvalidArgTypeError, SharedRouterError } from './errors.js'
import { native, type NativeConfigureOptions, type NativeHandle, type NativeParams } from './native.js'
import { PLACEMENT_CHOICES, type ResolvedParams } from './options.js'

export function configureNative(h: NativeHandle, p: ResolvedParams): void {
  const options: NativeConfigureOptions = {
    strategy: p.strategy,
    prefixLength: p.prefixLength,
    concurrencyThreshold: p.concurrencyThreshold,
    blockSize: p.blockSize,
    indexBlocks: p.indexBlocks,
    placementChoices: PLACEMENT_CHOICES[p.placement],
    loadFactor: p.loadFactor,
    prefillWeight: p.prefillWeight,
    matchLength: p.matchLength,
    exactBlockSize: p.exactBlockSize,
    exactCapacity: p.exactCapacity,
    cpuBlockWeight: p.cpuBlockWeight,
    pendingMs: p.pendingMs,
    engineLoadAll: p.engineLoadAll,
  }
  native.router_configure(h, options)
}

export function resolvedFromNative(p: NativeParams): ResolvedParams {
  return {
    strategy: p.strategy,
    prefixLength: p.prefixLength,
    concurrencyThreshold: p.concurrencyThreshold,
    thresholdSet: true,
    blockSize: p.blockSize,
    indexBlocks: p.indexBlocks,
    placement: p.placementChoices === PLACEMENT_CHOICES.hash ? 'hash' : 'balanced',
    matchLength: p.matchLength,
    loadFactor: p.loadFactor,
    prefillWeight: p.prefillWeight,
    exactBlockSize: p.exactBlockSize,
    exactCapacity: p.exactCapacity,
    cpuBlockWeight: p.cpuBlockWeight,
    pendingMs: p.pendingMs,
    engineLoadAll: p.engineLoadAll,
  }
}

// Where the state goes: anonymous memory unless a directory is named; the directory is
// for the file the system falls back to, tmpfs when it has one (no disk writes).
export function sharedBacking(shared: boolean | { directory: string } | undefined): { dir: string; anonymous: boolean } | undefined {
  if (shared === undefined || shared === false) return undefined
  if (shared === true) return { dir: existsSync('/dev/shm') ? '/dev/shm' : tmpdir(), anonymous: true }
  const dir = typeof shared === 'object' && shared !== null ? (shared as { directory?: unknown }).directory : undefined
  if (typeof dir !== 'string' || dir.length === 0) throw new InvalidArgTypeError('shared', 'a boolean or { directory: string }', shared)
  return { dir, anonymous: false }
}

// Native errors carry a code but are plain Errors; shared-state ones become SharedRouterError.
export function nativeCall<T>(call: () => T): T {
  try {
    return call()
  } catch (err) {
    const code = (err as { code?: unknown }).code
    if (code === 'ROUTER_READ_ONLY' || code === 'ROUTER_SHARED_STATE') throw new SharedRouterError(code, (err as Error).message, { cause: err })
    throw err
  }
}
