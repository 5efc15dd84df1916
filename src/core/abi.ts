// The numbers TypeScript and the addon must agree on: the io block's words (router_pick_io),
// key_extract's io, the KeyHashes record's size, the process table. The addon exports its own
// (native abi()); native.ts compares them with this table as it loads, so that a build whose
// C++ moved a word fails at start, naming it, instead of routing on the wrong numbers. The
// addon's ranges (its backstop for router_configure and the membership) are checked to hold
// TypeScript's own limits by options.ts.
import { PrefixRouterError } from './errors.js'

export const ABI = {
  /** router_io's Float64Array: a pick's numeric arguments in, its result over words 0-3 and the out* words. */
  io: {
    kind: 0,
    keyBytes: 1,
    anchor: 2,
    hashed: 3,
    group: 4,
    tenant: 5,
    avoidCount: 6,
    avoid: 7,
    maxAvoid: 16,
    exact: 23,
    now: 24,
    alternates: 25,
    maxAlternates: 8,
    // Written by the pick beside its result over words 0-3.
    outBlocks: 26,
    outHeld: 27,
    outExact: 28,
    outAlternates: 29,
    outAlternateSlot: 30,
    outAlternateGeneration: 38,
    words: 46,
  },
  /** key_extract's Float64Array: the words it needs, and the two more for the token memo. */
  keyMeta: { words: 12, required: 10 },
  /** The record key_extract writes after an extracted text (nine 64-bit words, 8-aligned). */
  keyHashes: { bytes: 72, align: 8 },
  /** Rows of a shared state's process table: the cluster primary holds one, each worker one. */
  maxProcesses: 64,
}

export type AbiTable = typeof ABI

/** The addon's abi(): the table above, and the bounds it enforces as a backstop. */
export interface NativeAbi extends AbiTable {
  maxMembers: number
  maxIdBytes: number
  maxVnodes: number
  maxSlots: number
  configure: Record<string, { min: number; max: number }>
}

/** The addon and this package disagree on the layout of something they share. */
export class NativeAbiError extends PrefixRouterError {
  declare readonly code: 'NATIVE_ABI_MISMATCH'
  constructor(problems: string[], binding: string) {
    super('NATIVE_ABI_MISMATCH', `the native addon (${binding}) does not match this package's TypeScript: ${problems.join('; ')}; rebuild it (npx node-gyp rebuild) or reinstall the package`, {
      details: { problems, binding },
    })
    this.name = 'NativeAbiError'
  }
}

/** Where `ts` and `got` differ, as "path: TypeScript x, addon y", leaf by leaf of `ts`. */
export function abiDifferences(ts: unknown, got: unknown, path = ''): string[] {
  if (typeof ts === 'object' && ts !== null) {
    const g = typeof got === 'object' && got !== null ? (got as Record<string, unknown>) : {}
    return Object.entries(ts).flatMap(([k, v]) => abiDifferences(v, g[k], path === '' ? k : `${path}.${k}`))
  }
  return Object.is(ts, got) ? [] : [`${path}: TypeScript ${String(ts)}, addon ${String(got)}`]
}

/** TypeScript's limits that reach outside the addon's ranges (which would refuse, or not check, what TypeScript lets through). */
export function rangeDifferences(ts: Record<string, { min: number; max: number }>, addon: Record<string, { min: number; max: number } | undefined>): string[] {
  return Object.entries(ts).flatMap(([k, r]) => {
    const a = addon[k]
    if (a === undefined) return [`${k}: TypeScript ${r.min}..${r.max}, addon has no range`]
    return r.min < a.min || r.max > a.max ? [`${k}: TypeScript ${r.min}..${r.max}, addon ${a.min}..${a.max}`] : []
  })
}

/** The addon's ranges by the names limitsAgainstAddon (options.ts) gives TypeScript's. */
export function addonRanges(addon: NativeAbi): Record<string, { min: number; max: number }> {
  return {
    ...addon.configure,
    vnodes: { min: 1, max: addon.maxVnodes },
    instances: { min: 0, max: addon.maxMembers },
    idBytes: { min: 0, max: addon.maxIdBytes },
    slots: { min: 1, max: addon.maxSlots },
  }
}

/** Throws NativeAbiError listing every difference; `table` is this package's (a test passes a wrong one). */
export function checkAbi(addon: unknown, binding: string, table: AbiTable = ABI): void {
  const problems = abiDifferences(table, addon)
  if (problems.length > 0) throw new NativeAbiError(problems, binding)
}

/** The same for ranges: TypeScript's `ts` must lie inside the addon's. */
export function checkRanges(ts: Record<string, { min: number; max: number }>, addon: Record<string, { min: number; max: number } | undefined>, binding: string): void {
  const problems = rangeDifferences(ts, addon)
  if (problems.length > 0) throw new NativeAbiError(problems, binding)
}
