// The numbers TypeScript and the addon must agree on: the io block's words and the pick's
// results (router_pick_io), key_extract's io words and codes, the KeyHashes record's size, the
// exact view's codes and batch records, the process table, the threshold that means none,
// router_configure's option names. The addon exports its own
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
  /** The pick's result over words 0-3 of io, and router_pick_io's returns. */
  pick: { slot: 0, generation: 1, overflow: 2, prefill: 3, picked: 0, noInstances: -1, noGroup: -2 },
  /**
   * key_extract's Float64Array: the words it needs, and the two more for the token memo; the
   * numbers in (api to hash), the results written over them (textBytes to cacheKeyGeneration),
   * the escapes word's bits, the API codes and the status codes it returns.
   */
  keyMeta: {
    words: 12,
    required: 10,
    api: 0,
    span: 1,
    prefix: 2,
    maxDepth: 3,
    outOffset: 4,
    blockBytes: 5,
    hash: 6,
    textBytes: 0,
    keyBytes: 1,
    anchorBytes: 2,
    modelBegin: 3,
    modelEnd: 4,
    cacheKeyBegin: 5,
    cacheKeyEnd: 6,
    stream: 7,
    escapes: 8,
    hashBytes: 9,
    modelGeneration: 10,
    cacheKeyGeneration: 11,
    escapedModel: 1,
    escapedCacheKey: 2,
    apis: { chat: 0, completions: 1 },
    status: { ok: 0, invalid: 1, unsupported: 2 },
  },
  /** The record key_extract writes after an extracted text (nine 64-bit words, 8-aligned). */
  keyHashes: { bytes: 72, align: 8 },
  /**
   * The exact view: exact.store's results below zero, the view codes (in ExactView's order), the
   * tiers, the engine block sizes it takes, and router_exact_apply's op records.
   */
  exact: {
    orphan: -1,
    notMember: -2,
    blockSize: -3,
    capacity: -4,
    minBlockSize: 1,
    maxBlockSize: 1024,
    views: { none: 0, fresh: 1, stale: 2 },
    tiers: { gpu: 0, offloaded: 1 },
    op: { kind: 0, tier: 1, blocks: 2, parent: 3, words: 4, store: 0, remove: 1, clear: 2 },
  },
  /** Rows of a shared state's process table: the cluster primary holds one, each worker one. */
  maxProcesses: 64,
  /** A strategy's "no threshold" (kNoThreshold): the highest concurrencyThreshold an operator may set. */
  noThreshold: 1024,
  /** The names router_configure reads from its options object, in the addon's order. */
  configureFields: [
    'strategy',
    'prefixLength',
    'concurrencyThreshold',
    'blockSize',
    'indexBlocks',
    'placementChoices',
    'loadFactor',
    'prefillWeight',
    'matchLength',
    'exactBlockSize',
    'exactCapacity',
    'cpuBlockWeight',
    'pendingMs',
    'engineLoadAll',
  ],
} as const

/** The table's shape, its numbers any numbers (a test passes one with an entry altered). */
export type AbiTable = Widen<typeof ABI>
type Widen<T> = T extends number ? number : T extends string ? string : { readonly [K in keyof T]: Widen<T[K]> }

/** The addon's abi(): the table above, and the bounds it enforces as a backstop. */
export interface NativeAbi extends AbiTable {
  maxMembers: number
  maxIdBytes: number
  maxVnodes: number
  maxSlots: number
  configure: Record<string, { min: number; max: number }>
  /** The native Strategy enum's value for each name, which must be the name's place in the registry. */
  strategyEnum: Record<string, number>
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

/**
 * Where the native Strategy enum and the registry's order disagree: the router takes a strategy
 * by its place in the registry (strategies()) and stores it as the enum, so each must be the other.
 */
export function strategyOrderDifferences(strategyEnum: unknown, registry: readonly string[]): string[] {
  const e = typeof strategyEnum === 'object' && strategyEnum !== null ? (strategyEnum as Record<string, unknown>) : {}
  const names = new Set([...Object.keys(e), ...registry])
  return [...names].flatMap((name) => {
    const at = registry.indexOf(name)
    return e[name] === at ? [] : [`strategyEnum.${name}: enum ${e[name] === undefined ? 'has none' : String(e[name])}, registry ${at < 0 ? 'has none' : `at ${at}`}`]
  })
}

/**
 * Throws NativeAbiError listing every difference; `table` is this package's (a test passes a
 * wrong one), `registry` the strategy names in the registry's order.
 */
export function checkAbi(addon: unknown, binding: string, table: AbiTable = ABI, registry?: readonly string[]): void {
  const problems = abiDifferences(table, addon)
  if (registry !== undefined) problems.push(...strategyOrderDifferences((addon as { strategyEnum?: unknown } | null)?.strategyEnum, registry))
  if (problems.length > 0) throw new NativeAbiError(problems, binding)
}

/** The same for ranges: TypeScript's `ts` must lie inside the addon's. */
export function checkRanges(ts: Record<string, { min: number; max: number }>, addon: Record<string, { min: number; max: number } | undefined>, binding: string): void {
  const problems = rangeDifferences(ts, addon)
  if (problems.length > 0) throw new NativeAbiError(problems, binding)
}
