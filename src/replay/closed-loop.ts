// Closed-loop load for replay: a fixed number of clients, each sending the workload's next
// request as soon as its previous one has finished (no think time), as a load generator with
// a fixed concurrency does. Throughput then shows what a strategy's speed is worth: the
// faster lane sends more requests in the same simulated time. The workload's timestamps are
// ignored; its requests are taken in order, prepared once, and shared by every lane, each
// lane drawing as many as its own speed allows.
import { prepareRequest, type PrepareOptions, type PreparedRequest } from './prepare.js'
import type { TimedRequest } from './types.js'

export class SharedRequests {
  private readonly source: Iterator<TimedRequest>
  // Prepared requests from index `base` on; lanes read them by index.
  private readonly kept: PreparedRequest[] = []
  private base = 0
  private ended = false

  constructor(
    requests: Iterable<TimedRequest>,
    private readonly prep: PrepareOptions,
    /** Called once per request, in order, when it is first prepared. */
    private readonly onPrepared: (p: PreparedRequest) => void = () => undefined,
  ) {
    this.source = requests[Symbol.iterator]()
  }

  /** Requests prepared so far: the most any lane has drawn. */
  get prepared(): number {
    return this.base + this.kept.length
  }

  /** Request `i` of the stream, or undefined once the workload has no more. */
  get(i: number): PreparedRequest | undefined {
    if (i < this.base) throw new RangeError(`request ${i} was already released`)
    while (i >= this.prepared && !this.ended) {
      const next = this.source.next()
      if (next.done === true) {
        this.ended = true
        break
      }
      const p = prepareRequest(next.value, this.prepared, this.prep)
      this.kept.push(p)
      this.onPrepared(p)
    }
    return this.kept[i - this.base]
  }

  /** Forgets requests below `index` (every lane has drawn past them). */
  release(index: number): void {
    const drop = Math.min(index - this.base, this.kept.length)
    if (drop <= 0) return
    this.kept.splice(0, drop)
    this.base += drop
  }
}
