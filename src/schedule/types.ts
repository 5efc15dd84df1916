// The scheduler's words: what it knows of a request, what one pick gives, and what a profile
// decides. Both fronts (serve's HTTP proxy and the endpoint picker) and the replay's lanes speak
// them, each with a picker over its own fleet.
import type { ExactTokens, Lease } from '../core/router.js'
import type { Leg } from '../fleet/groups.js'

/** A request as the scheduler sees it: its routing key, what the fleet filters on, and its size. */
export interface RequestView {
  key: Uint8Array | string
  tenant: string | undefined
  model: string | undefined
  anchor: number | undefined
  /** The prompt's token ids (the exact view), when the request was tokenized. */
  exact: ExactTokens | undefined
  /** The prompt's length in tokens: counted when it was tokenized, else estimated from its bytes. */
  promptTokens: number
}

/** One pick: the lease it took (in flight and queued prefill counted there) and the instance. */
export interface Chosen<I> {
  lease: Lease
  instance: I
}

/**
 * One pick among the instances of a fleet that play a leg. Filters (model, role, health) are the
 * picker's; the scorer is the fleet's native strategy. Throws a RequestError when no instance can
 * take the request: `no_prefill_instance` / `no_decode_instance` when none plays the leg.
 */
export interface LegPicker<I> {
  /** Whether requests may run over two instances (some instance plays one leg only). */
  readonly disaggregated: boolean
  /** Tokens of prompt in one block of routing key (what Lease.heldBlocks counts), for the approximate view. */
  readonly blockTokens: number
  /**
   * Tokens of prompts the instance has still to compute for the requests routed to it (its
   * leases' queued prefill, and what its engine reports beyond them), this router's view.
   */
  queuedPrefillTokens(instance: I): number
  /**
   * The least queuedPrefillTokens among the instances in rotation that play `leg` (any model they
   * serve), Infinity when none does: how soon the emptiest of them could start a new prompt.
   */
  leastQueuedPrefillTokens(leg: Leg): number
  /** Requests in flight on the instance: this router's leases and what its engine reports beyond them. */
  inFlight(instance: I): number
  /**
   * With the exact view (the request tokenized, the instances' KV events followed): how many of
   * the prompt's leading tokens each instance's engine has reported holding, blocks only pending
   * there (routed to it, not reported yet) left out; undefined without the exact view. A dry
   * run, asked before the pick, whose lease adds the prompt's blocks as pending where it lands.
   */
  reportedTokens?(view: RequestView): ((instance: I) => number) | undefined
  /** `leg` undefined: a whole request (on an instance that decodes, in a disaggregated fleet). */
  pick(view: RequestView, leg: Leg | undefined, avoid?: readonly Lease[], alternates?: number): Chosen<I>
}

/** Why a request runs whole on one instance. */
export type SingleReason =
  /** The fleet does not disaggregate. */
  | 'aggregated'
  /** The decode instance lacks less of the prompt than the threshold: moving it costs more than computing it. */
  | 'short_uncached'
  /** Past the threshold, but the prefill pool is busier: the first token comes sooner from the decode instance, within its cap (decodePrefillCap). */
  | 'prefill_busier'
  /** No prefill instance can take it (none in rotation, or none serving the model): decode-only. */
  | 'no_prefill_instance'

/** What a profile decides: one instance, or a prefill leg and a decode leg on two. */
export type Schedule<I> =
  | { profile: 'single'; target: Chosen<I>; reason: SingleReason; uncachedTokens: number | undefined }
  | { profile: 'pd'; prefill: Chosen<I>; decode: Chosen<I>; uncachedTokens: number }
