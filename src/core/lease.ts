// A routed request's hold on its instance: the counter slot the pick took, released once,
// and the queued prefill it gives back at its first token.
// What the garbage collector needs to end a lease nobody released: updated by firstToken and
// release.
export interface Held {
  slot: number
  prefill: number
  released: boolean
}

/** What a lease calls on the router that made it (Router keeps these private to its leases). */
export interface LeaseOwner {
  /** Registers the lease with the collector that ends it if it is dropped unreleased. */
  track(lease: Lease, held: Held): void
  firstToken(slot: number, prefill: number): void
  release(slot: number, prefill: number): void
}

const NO_ALTERNATES: readonly string[] = Object.freeze([])

/**
 * One routed request. Call release() when it finishes, fails or is aborted; later calls do
 * nothing. For longest_prefix, call firstToken() when the response's first token arrives: the
 * router counts the prompt's blocks as queued prefill on the instance until then (release()
 * does it otherwise), and sends new requests where less is queued.
 */
export class Lease {
  #router: LeaseOwner | null
  readonly #held: Held
  /** Id of the instance the request goes to. */
  readonly instance: string
  /** True when load sent the request away from where the strategy would have put it. */
  readonly overflow: boolean
  /**
   * What the strategy saw of the prompt at that instance (strategies matching blocks:
   * longest_prefix): the prompt's blocks of routing key, how many of them it counted as held
   * there, and whether that count came from the instance's own KV events (the exact view)
   * rather than from where earlier prompts were sent. 0, 0, false for the other strategies.
   */
  readonly blocks: number
  readonly heldBlocks: number
  readonly exact: boolean
  /** The next choices the pick ranked (PickOptions.alternates), best first; empty unless asked. */
  alternates: readonly string[] = NO_ALTERNATES

  constructor(router: LeaseOwner, slot: number, instance: string, overflow: boolean, prefill = 0, blocks = 0, heldBlocks = 0, exact = false) {
    this.#router = router
    this.#held = { slot, prefill, released: false }
    this.instance = instance
    this.overflow = overflow
    this.blocks = blocks
    this.heldBlocks = heldBlocks
    this.exact = exact
    router.track(this, this.#held)
  }

  /** The share of the prompt's blocks the instance held (0 to 1), as `blocks` and `heldBlocks` say; 0 without blocks. */
  get heldShare(): number {
    return this.blocks === 0 ? 0 : this.heldBlocks / this.blocks
  }

  /** The counter slot `lease` holds: what a pick's `avoid` passes for it. */
  static slotOf(lease: Lease): number {
    return lease.#held.slot
  }

  get released(): boolean {
    return this.#router === null
  }

  /** The instance has sent the first token: the prompt's prefill is over. Later calls do nothing. */
  firstToken(): void {
    const r = this.#router
    if (r === null || this.#held.prefill === 0) return
    r.firstToken(this.#held.slot, this.#held.prefill)
    this.#held.prefill = 0
  }

  release(): void {
    const r = this.#router
    if (r === null) return
    this.#router = null
    const held = this.#held
    held.released = true
    r.release(held.slot, held.prefill)
    held.prefill = 0
  }
}
