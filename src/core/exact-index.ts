// The exact view: what each instance's engine reports it holds (its KV events), kept in the
// router's native state beside the prefix index and read by longest_prefix's picks. A thin
// class over the router's handle (Router.exact); validation lives here, the native side
// (native/bind_exact.cc) checks again as a backstop.
import { ABI } from './abi.js'
import { InvalidArgTypeError, OutOfRangeError } from './errors.js'
import type { ExactBatch } from './exact-batch.js'
import { native, type NativeExactInstance, type NativeHandle } from './native.js'
import { checkInt, LIMITS } from './options.js'
import { checkU64 } from './u64.js'

/** Whether the router follows an instance's KV events: 'fresh' (trusted), 'stale' (events were lost), 'none'. */
export type ExactView = keyof typeof ABI.exact.views
/** The engine's blocks the exact view holds for one instance. */
export interface ExactInstanceInfo {
  view: ExactView
  gpuBlocks: number
  offloadedBlocks: number
  /** Blocks of prompts routed there that its events have not reported yet (as of the latest pick). */
  pendingBlocks: number
}
/** ExactIndex.match: one instance's leading blocks of a prompt, split by tier. */
export interface ExactMatchInfo extends ExactInstanceInfo {
  instance: string
  blocks: number
}

/** ExactIndex.store results below zero. */
export const EXACT_ORPHAN = ABI.exact.orphan
export const EXACT_NOT_MEMBER = ABI.exact.notMember
export const EXACT_BLOCK_SIZE = ABI.exact.blockSize
export const EXACT_CAPACITY = ABI.exact.capacity

/** The views by their native code (ABI.exact.views). */
const VIEWS: readonly ExactView[] = (Object.entries(ABI.exact.views) as [ExactView, number][]).sort((a, b) => a[1] - b[1]).map(([v]) => v)
function checkTier(v: unknown): 0 | 1 {
  if (v !== ABI.exact.tiers.gpu && v !== ABI.exact.tiers.offloaded) throw new OutOfRangeError('tier', '0 (GPU) or 1 (offloaded)', v)
  return v
}
function checkInstance(v: unknown): string {
  if (typeof v !== 'string') throw new InvalidArgTypeError('instance', 'a string', v)
  return v
}
function exactInfo(i: NativeExactInstance): ExactInstanceInfo {
  return { view: VIEWS[i.view] ?? 'none', gpuBlocks: i.gpuBlocks, offloadedBlocks: i.offloadedBlocks, pendingBlocks: i.pendingBlocks }
}

export class ExactIndex {
  readonly #handle: () => NativeHandle

  /** Over the handle its router gives (which throws once the router is closed). */
  constructor(handle: () => NativeHandle) {
    this.#handle = handle
  }

  /**
   * A BlockStored event of `instance`'s engine. `engineHashes` are the engine's hashes of the
   * blocks (reduced to 64 bits), `tokenIds` their tokens (engineHashes.length × blockSize ids),
   * `parent` the engine hash of the block before the first (null for a prompt's first block),
   * `seed` exactSeed(lora, salt), `tier` 0 for GPU and 1 for an offloaded copy. Returns the
   * blocks recorded, or EXACT_ORPHAN (-1: the parent is unknown, nothing stored),
   * EXACT_NOT_MEMBER (-2), EXACT_BLOCK_SIZE (-3: not exactBlockSize), EXACT_CAPACITY (-4: the
   * index is full, some blocks were dropped). Allowed on attached routers: every process keeps
   * its own exact view.
   */
  store(instance: string, parent: bigint | null, engineHashes: BigUint64Array, tokenIds: Uint32Array, blockSize: number, seed: bigint, tier: 0 | 1): number {
    const h = this.#handle()
    checkInstance(instance)
    if (parent !== null) checkU64('parent', parent)
    if (!(engineHashes instanceof BigUint64Array)) throw new InvalidArgTypeError('engineHashes', 'a BigUint64Array', engineHashes)
    if (!(tokenIds instanceof Uint32Array)) throw new InvalidArgTypeError('tokenIds', 'a Uint32Array', tokenIds)
    const l = LIMITS.exactBlockSize
    checkInt('blockSize', blockSize, l.min, l.max)
    if (tokenIds.length !== engineHashes.length * blockSize) {
      throw new OutOfRangeError(
        'tokenIds',
        `engineHashes.length × blockSize (${engineHashes.length * blockSize}) ids`,
        tokenIds.length,
        `tokenIds must hold engineHashes.length × blockSize = ${engineHashes.length * blockSize} ids; got ${tokenIds.length}`,
      )
    }
    checkU64('seed', seed)
    checkTier(tier)
    return native.router_exact_store(h, instance, parent, engineHashes, tokenIds, blockSize, seed, tier)
  }

  /** A BlockRemoved event. Returns the blocks removed (0 for a non-member). */
  remove(instance: string, engineHashes: BigUint64Array, tier: 0 | 1): number {
    const h = this.#handle()
    checkInstance(instance)
    if (!(engineHashes instanceof BigUint64Array)) throw new InvalidArgTypeError('engineHashes', 'a BigUint64Array', engineHashes)
    checkTier(tier)
    return Math.max(0, native.router_exact_remove(h, instance, engineHashes, tier))
  }

  /** An AllBlocksCleared event (pending blocks go too). False for a non-member. */
  clear(instance: string): boolean {
    return native.router_exact_clear(this.#handle(), checkInstance(instance))
  }

  /**
   * A batch of `instance`'s events in one native call, each applied as store, remove and clear
   * apply it, in order. Returns each op's result in the batch's order, valid until the batch
   * is applied again: a store's as store() returns it, a remove's blocks removed (-2 for a
   * non-member), a clear's 1 (0 for a non-member).
   */
  apply(instance: string, batch: ExactBatch): Float64Array {
    const h = this.#handle()
    checkInstance(instance)
    const b = batch.sealed()
    const l = LIMITS.exactBlockSize
    checkInt('blockSize', b.blockSize, l.min, l.max)
    native.router_exact_apply(h, instance, b.ops, b.count, b.words, b.tokens, b.blockSize, b.results)
    return b.results
  }

  /**
   * Whether picks trust `instance`'s view: 'fresh' (its events arrive), 'stale' (events were
   * lost: it falls back to the approximate estimate, its blocks kept), 'none' (no events: its
   * blocks are dropped). An instance starts at 'none', and again whenever it rejoins. False for
   * a non-member.
   */
  setView(instance: string, view: ExactView): boolean {
    const h = this.#handle()
    checkInstance(instance)
    const v = VIEWS.indexOf(view)
    if (v < 0) throw new OutOfRangeError('view', `one of ${VIEWS.join(', ')}`, view)
    return native.router_exact_set_view(h, instance, v)
  }

  /** The view of one instance; undefined for a non-member. */
  instance(instance: string): ExactInstanceInfo | undefined {
    const i = native.router_exact_instance(this.#handle(), checkInstance(instance))
    return i === undefined ? undefined : exactInfo(i)
  }

  /**
   * A dry run for operators: for each member, in ring order, the leading blocks of these
   * tokens (in blocks of exactBlockSize) its view holds, split by tier. Changes nothing but
   * expiring pending blocks at `now` (default performance.now()).
   */
  match(tokenIds: Uint32Array, seed: bigint, now?: number): ExactMatchInfo[] {
    const h = this.#handle()
    if (!(tokenIds instanceof Uint32Array)) throw new InvalidArgTypeError('tokenIds', 'a Uint32Array', tokenIds)
    checkU64('seed', seed)
    if (now !== undefined && (typeof now !== 'number' || !Number.isFinite(now))) throw new OutOfRangeError('now', 'a finite number of milliseconds', now)
    return native.router_exact_match(h, tokenIds, seed, now ?? performance.now()).map((r) => ({ instance: r.instance, blocks: r.blocks, ...exactInfo(r) }))
  }
}
