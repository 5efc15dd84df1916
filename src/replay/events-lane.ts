// `longest_prefix:events`: our Router with longest_prefix's default parameters, whose exact
// view is fed by the lane's engines' own KV events (after --kv-events-delay, the stream the
// event-fed peers get too) through the Router's exact API, as `serve` feeds it from vLLM's
// ZeroMQ publisher. Each pick passes the prompt's token ids and their chain's seed, and the
// lane's virtual clock as `now`, so the router matches instances by what their engines hold
// and lets the blocks it routed count as pending until their events arrive.
import { exactSeed } from '../core/exact-seed.js'
import { xxh3 } from '../core/hash.js'
import type { ExactInstanceInfo, ExactTokens, PickOptions, Router } from '../core/router.js'
import { EXACT_BLOCK_SIZE, EXACT_CAPACITY, EXACT_NOT_MEMBER, EXACT_ORPHAN } from '../core/exact-index.js'
import { mediumTier, type BlockStoredEvent, type EngineBlockHash, type KvEvent } from '../fleet/events/types.js'
import type { PreparedRequest } from './prepare.js'
import { NativeRouter, type RouterContext, type RouterFactory } from './routers.js'

export const EVENTS_LANE = 'longest_prefix:events'

export const longestPrefixEvents: RouterFactory = {
  name: EVENTS_LANE,
  source: "prefix-router (native core), exact view fed by the engines' KV events",
  create: (ctx) => new EventsRouter(ctx),
}

export const SHARED_LANE = 'longest_prefix:shared'

/**
 * `longest_prefix:shared`: the events lane whose replicas also share their queued prefill
 * (`serve --share-load redis://…`), every --share-load-interval, reaching the others after
 * --share-load-delay. The recommended deployment of several replicas; one router alone is the
 * events lane.
 */
export const longestPrefixShared: RouterFactory = {
  name: SHARED_LANE,
  source: "prefix-router (native core), exact view from the engines' KV events, queued prefill shared between replicas",
  create: (ctx) => new EventsRouter(ctx, true),
}

/** What the exact view refused, by reason (exactStore's negative results). */
export interface ExactRefusals {
  /** Tokens that do not fill the event's blocks: a malformed event, dropped. */
  malformed: number
  orphan: number
  notMember: number
  blockSize: number
  capacity: number
}

export class EventsRouter extends NativeRouter {
  readonly refused: ExactRefusals = { malformed: 0, orphan: 0, notMember: 0, blockSize: 0, capacity: 0 }
  private members: readonly number[]

  override readonly sharesLoad: boolean

  constructor(ctx: RouterContext, shares = false) {
    super('longest_prefix', undefined, ctx, { exactBlockSize: ctx.blockSize })
    this.sharesLoad = shares
    this.members = ctx.members
    for (const m of ctx.members) this.router.exact.setView(ctx.ids[m]!, 'fresh')
  }

  readonly kvEvents = (instance: number, events: readonly KvEvent[]): void => {
    applyKvEvents(this.router, this.ctx.ids[instance]!, events, this.refused)
  }

  /** What the router's exact view holds for engine `instance`. */
  view(instance: number): ExactInstanceInfo | undefined {
    return this.router.exact.instance(this.ctx.ids[instance]!)
  }

  protected override pickExtras(req: PreparedRequest, now: number): PickOptions {
    return { tokens: exactTokensOf(req, EVENTS_LANE), now }
  }

  override setInstances(members: readonly number[]): void {
    const before = new Set(this.members)
    super.setInstances(members)
    // An instance (re)joining starts with no view; its engine's events follow from now on.
    for (const m of members) if (!before.has(m)) this.router.exact.setView(this.ctx.ids[m]!, 'fresh')
    this.members = [...members]
  }
}

/**
 * One engine's batch of KV events into the router's exact view of `id`, as serve's subscriber
 * applies a publisher's: what the view refused counted in `refused`.
 */
export function applyKvEvents(router: Router, id: string, events: readonly KvEvent[], refused: ExactRefusals): void {
  for (const ev of events) {
    if (ev.type === 'BlockStored') stored(router, id, ev, refused)
    else if (ev.type === 'BlockRemoved') router.exact.remove(id, uint64s(ev.blockHashes), mediumTier(ev.medium))
    else router.exact.clear(id)
  }
}

function stored(router: Router, id: string, ev: BlockStoredEvent, refused: ExactRefusals): void {
  // A malformed event is dropped, as a subscriber drops a bad frame, rather than stopping the run.
  if (!Number.isInteger(ev.blockSize) || ev.blockSize < 1 || ev.tokenIds.length !== ev.blockHashes.length * ev.blockSize) {
    refused.malformed++
    return
  }
  // Block 0's extra keys carry the adapter's name and then cache_salt (see the engine's
  // KV event log); the router seeds its chain with the same two names.
  const extra = ev.parentBlockHash === null ? (ev.extraKeys?.[0] ?? null) : null
  const salt = extra?.find((k) => typeof k === 'string' && k !== ev.loraName) as string | undefined
  const n = router.exact.store(
    id,
    ev.parentBlockHash === null ? null : uint64(ev.parentBlockHash),
    uint64s(ev.blockHashes),
    Uint32Array.from(ev.tokenIds),
    ev.blockSize,
    exactSeed(ev.loraName ?? undefined, salt),
    mediumTier(ev.medium),
  )
  if (n === EXACT_ORPHAN) refused.orphan++
  else if (n === EXACT_NOT_MEMBER) refused.notMember++
  else if (n === EXACT_BLOCK_SIZE) refused.blockSize++
  else if (n === EXACT_CAPACITY) refused.capacity++
}

/** The prompt's token ids and their chain's seed, as the exact view is asked (the base model, the body's cache_salt). */
export function exactTokensOf(req: PreparedRequest, lane: string): ExactTokens {
  const ids = req.prompt.tokenIds
  if (ids === undefined) throw new Error(`${lane} needs the prompts' token ids (prepare with tokens)`)
  return { ids, seed: exactSeed(undefined, req.cacheSalt) }
}

/** An engine hash as the router keys it: an integer's low 64 bits, or the XXH3 of a byte hash. */
function uint64(h: EngineBlockHash): bigint {
  return typeof h === 'bigint' ? BigInt.asUintN(64, h) : xxh3(h)
}

function uint64s(hashes: readonly EngineBlockHash[]): BigUint64Array {
  const out = new BigUint64Array(hashes.length)
  for (let i = 0; i < hashes.length; i++) out[i] = uint64(hashes[i]!)
  return out
}
