// Loads the addon through node-gyp-build: a local build (build/Release) when there is one,
// otherwise the prebuild for this platform in prebuilds/. PREBUILDS_ONLY=1 skips local builds.
import { createRequire } from 'node:module'
import { fileURLToPath } from 'node:url'
import { checkAbi, ABI, type NativeAbi } from './abi.js'

export interface NativeBuildInfo {
  simd: 'scalar' | 'sse2' | 'avx2' | 'neon'
  simdSupported: string[]
  sourcesHash: string
  napiVersion: number
  compiler?: string
}

export interface NativeInstance {
  id: string
  weight: number
  inFlight: number
  groups: string[]
  queuedPrefillBlocks: number
  /** The load its engine reports beyond this router's leases (Router.setEngineLoad); 0 without a report. */
  engineInFlight: number
  engineQueuedPrefillBlocks: number
}
export interface NativeStats {
  slotsInUse: number
  ringPoints: number
  ringBytes: number
  indexEntries: number
  indexBytes: number
  /** Leases the garbage collector ended because the embedder never released them (a bug to fix). */
  leasesCollected: number
  /** The exact view: entries held (reported blocks per instance and tier, plus pending ones). */
  exactEntries: number
  /** The exact view's bound on entries (exactCapacity). */
  exactCapacity: number
  /** An estimate of the exact index's memory: its tables' bucket arrays and nodes. */
  exactMemoryBytes: number
  /** Blocks not recorded because the exact index was full. */
  exactDropped: number
  /** BlockStored events whose parent block was unknown (nothing stored for them). */
  exactOrphans: number
}
/** router_exact_instance: view 0 none, 1 fresh, 2 stale. */
export interface NativeExactInstance { view: number; gpuBlocks: number; offloadedBlocks: number; pendingBlocks: number }
export interface NativeExactRow extends NativeExactInstance { instance: string; blocks: number }
export interface NativeParams {
  strategy: string
  prefixLength: number
  concurrencyThreshold: number
  blockSize: number
  indexBlocks: number
  placementChoices: number
  matchLength: number
  loadFactor: number
  prefillWeight: number
  exactBlockSize: number
  exactCapacity: number
  cpuBlockWeight: number
  pendingMs: number
  engineLoadAll: boolean
}

type Field = (typeof ABI.configureFields)[number]
/** The exact view's four and engineLoadAll: the addon's defaults when left out. */
type Optional = 'exactBlockSize' | 'exactCapacity' | 'cpuBlockWeight' | 'pendingMs' | 'engineLoadAll'
/** router_configure's options: the names ABI.configureFields lists (checked against the addon's at load), and no others. */
export type NativeConfigureOptions = { strategy: string; engineLoadAll?: boolean } & Record<Exclude<Field, 'strategy' | Optional>, number> &
  Partial<Record<Exclude<Optional, 'engineLoadAll'>, number>>

declare const handleBrand: unique symbol
export type NativeHandle = { readonly [handleBrand]: true }

/** A strategy and its traits (StrategyTraits, native/strategy/strategy.h). */
export interface NativeStrategyInfo {
  name: string
  /** It has a target of its own, which load may overflow: its picks are `target` or `overflow`. */
  targeted: boolean
  /**
   * It matches the prompt's chained blocks (blockSize bytes, up to matchLength) against an
   * index of what was sent where: the text is read that far, a chat's key ends at its anchor,
   * and a pick's blocks to compute are queued on the instance until its first token.
   */
  blocks: boolean
  /** It routes by the engines' KV events when the request brings token ids. */
  exactView: boolean
  /** It weighs the engines' reported load without engineLoadAll (engine load `auto` reads it). */
  engineLoad: boolean
  /** It reads `placement`: where a prompt no instance holds goes. */
  placement: boolean
  /** Its concurrency threshold when none is given. */
  defaultThreshold: number
}

export interface NativeBinding {
  xxh3(data: Uint8Array | string, seed?: bigint): bigint
  xxh3_path(path: number, data: Uint8Array | string, seed?: bigint): bigint
  xxh3_chain(data: Uint8Array | string, blockBytes: number, seed: bigint, out: BigUint64Array | Float64Array): number
  build_info(): NativeBuildInfo
  /** Every offset, size and limit the TypeScript side must agree with (src/core/abi.ts). */
  abi(): NativeAbi
  router_create(name: string | undefined, vnodes: number, slots: number, sharedDir?: string, anonymous?: boolean): NativeHandle
  router_open(name: string): NativeHandle
  router_attach(path: string): NativeHandle
  router_shared_path(h: NativeHandle): string | undefined
  router_release_process(h: NativeHandle, pid: number): number
  router_lease_collected(h: NativeHandle, slot: number, prefill: number): void
  router_params(h: NativeHandle): NativeParams
  router_close(h: NativeHandle): void
  /** The whole set, by name (router-native.ts builds it; abi().configureFields lists the names the addon reads). */
  router_configure(h: NativeHandle, options: NativeConfigureOptions): void
  router_set_instances(h: NativeHandle, ids: string[], weights: number[], groups?: string[][], indexBlocks?: number[]): void
  /** The fleet record (creator only): text published beside the membership, in the shared state. */
  router_set_fleet(h: NativeHandle, text: string): void
  /** The fleet record and its version, unless its version is still `since` (0: none read yet). */
  router_fleet(h: NativeHandle, since: number): { version: number; text: string } | undefined
  /** The handle's io block: router_pick_io's numeric arguments in, its result [slot, generation, overflow 0/1, prefill blocks] out over words 0-3. */
  router_io(h: NativeHandle): Float64Array
  /** ABI.pick: picked (0) with the result in the io block; noInstances (-1); noGroup (-2, no instance in the group). Its numeric arguments are in the io block (src/core/router.ts names its words). */
  router_pick_io(
    h: NativeHandle,
    prefix: Uint8Array | string,
    tenant: string | undefined,
    group: string | undefined,
    tokens?: Uint32Array,
    seed?: bigint,
  ): number
  /** The id router_pick_io takes for a group; -1 for a name no membership of the router listed. */
  router_group_id(h: NativeHandle, name: string): number
  router_release(h: NativeHandle, slot: number, prefill?: number): boolean
  router_first_token(h: NativeHandle, slot: number, prefill: number): void
  /** The strategy registry in order, each with its traits (native/strategy/strategy.h). */
  strategies(): NativeStrategyInfo[]
  router_slot_id(h: NativeHandle, slot: number): string
  router_in_flight(h: NativeHandle, id: string): number
  /** The load at `id` beyond the router's own leases (its engine's report); false for an id no member has. */
  router_set_engine_load(h: NativeHandle, id: string, inFlight: number, prefillBlocks: number): boolean
  router_instances(h: NativeHandle): NativeInstance[]
  router_stats(h: NativeHandle): NativeStats
  /** Blocks recorded; -1 unknown parent, -2 not a member, -3 another block size, -4 capacity reached. */
  router_exact_store(
    h: NativeHandle,
    instance: string,
    parent: bigint | null,
    engineHashes: BigUint64Array,
    tokenIds: Uint32Array,
    blockSize: number,
    seed: bigint,
    tier: number,
  ): number
  /** Blocks removed; -2 not a member. */
  router_exact_remove(h: NativeHandle, instance: string, engineHashes: BigUint64Array, tier: number): number
  /** One instance's batch of ops (exact-batch.ts) in one call: each op's result into `out`; returns the ops applied. */
  router_exact_apply(
    h: NativeHandle,
    instance: string,
    ops: Float64Array,
    count: number,
    words: BigUint64Array,
    tokenIds: Uint32Array,
    blockSize: number,
    out: Float64Array,
  ): number
  router_exact_clear(h: NativeHandle, instance: string): boolean
  router_exact_set_view(h: NativeHandle, instance: string, view: number): boolean
  router_exact_instance(h: NativeHandle, instance: string): NativeExactInstance | undefined
  router_exact_match(h: NativeHandle, tokenIds: Uint32Array, seed: bigint, now: number): NativeExactRow[]
}

const require = createRequire(import.meta.url)
const nodeGypBuild = require('node-gyp-build') as { resolve(dir: string): string }
const packageRoot = fileURLToPath(new URL('../..', import.meta.url))

/** Absolute path of the binary in use. */
export const bindingPath: string = nodeGypBuild.resolve(packageRoot)
export const native = require(bindingPath) as NativeBinding
// A build whose layout differs from this package's fails here, naming what moved.
// The strategy registry's order is checked against the Strategy enum the addon stores it as.
checkAbi(typeof native.abi === 'function' ? native.abi() : {}, bindingPath, ABI, typeof native.strategies === 'function' ? native.strategies().map((s) => s.name) : [])
