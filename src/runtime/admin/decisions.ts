// The last routing decisions, for the status page (GET / on the admin port): a ring of
// DECISIONS slots written in place where the access log is written (serve's proxy/handler.ts record()),
// read only when the page asks. The hot path pays a few stores per request: the strings are
// the request's own (no copy, no allocation), the numbers go into typed arrays.

/** Slots in the ring: the page shows this many, newest first. */
export const DECISIONS = 100

export interface Decision {
  /** When the request ended (ISO). */
  at: string
  endpoint: string
  /** The instance that answered, or null when the router answered itself (an error before a pick). */
  instance: string | null
  strategy: string
  /** The strategy's decision (target, overflow, or the strategy's name); null without a pick. */
  decision: string | null
  status: number
  /** From the request's arrival to its end. */
  ms: number
  /** Tries after the first. */
  retries: number
}

/** What a front knows of a request that reached an endpoint, as far as the ring keeps it (serve's Outcome has it). */
export interface Decided {
  endpoint: string
  instance: string
  strategy: string
  decision: string | undefined
  retries: number
}

export class DecisionRing {
  readonly capacity: number
  readonly #at: Float64Array
  readonly #ms: Float64Array
  readonly #status: Uint16Array
  readonly #retries: Uint16Array
  readonly #endpoint: string[]
  readonly #instance: string[]
  readonly #strategy: string[]
  readonly #decision: string[]
  #next = 0
  #total = 0

  constructor(capacity = DECISIONS) {
    if (!Number.isInteger(capacity) || capacity < 1) throw new RangeError(`a decision ring holds 1 or more; got ${capacity}`)
    this.capacity = capacity
    this.#at = new Float64Array(capacity)
    this.#ms = new Float64Array(capacity)
    this.#status = new Uint16Array(capacity)
    this.#retries = new Uint16Array(capacity)
    // Filled, so that they stay arrays of one element kind, written in place.
    this.#endpoint = new Array<string>(capacity).fill('')
    this.#instance = new Array<string>(capacity).fill('')
    this.#strategy = new Array<string>(capacity).fill('')
    this.#decision = new Array<string>(capacity).fill('')
  }

  /** Decisions recorded since start (the ring keeps the last `capacity`). */
  get total(): number {
    return this.#total
  }

  /** One request that reached an endpoint, as it ended. */
  record(out: Decided, status: number, ms: number): void {
    const i = this.#next
    this.#at[i] = Date.now()
    this.#ms[i] = ms
    this.#status[i] = status
    this.#retries[i] = out.retries
    this.#endpoint[i] = out.endpoint
    this.#instance[i] = out.instance
    this.#strategy[i] = out.strategy
    this.#decision[i] = out.decision ?? ''
    this.#next = i + 1 === this.capacity ? 0 : i + 1
    this.#total++
  }

  /** The decisions held, newest first. */
  recent(): Decision[] {
    const n = Math.min(this.#total, this.capacity)
    const out: Decision[] = []
    for (let k = 1; k <= n; k++) {
      const i = (this.#next - k + this.capacity) % this.capacity
      out.push({
        at: new Date(this.#at[i]!).toISOString(),
        endpoint: this.#endpoint[i]!,
        instance: this.#instance[i] || null,
        strategy: this.#strategy[i]!,
        decision: this.#decision[i] || null,
        status: this.#status[i]!,
        ms: Math.round(this.#ms[i]! * 10) / 10,
        retries: this.#retries[i]!,
      })
    }
    return out
  }
}
