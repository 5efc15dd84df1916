// The load at each instance beyond this router's own leases, from its two sources: the
// engine's requests in flight from other clients (the scraper) and the other replicas' queued
// prefill (share-load). The router takes both in one call, Router.setEngineLoad(id, inFlight,
// prefill): each source sets its half here, and the call carries the other's last figure, so
// neither overwrites the other.
import type { EngineLoadSink } from './sink.js'

interface Beyond {
  inFlight: number
  prefill: number
}

export interface EngineLoadTarget {
  setEngineLoad(id: string, inFlight: number, prefillBlocks: number): boolean
  inFlight(id: string): number
}

export class LoadBeyondOwn {
  readonly #router: EngineLoadTarget
  readonly #by = new Map<string, Beyond>()

  constructor(router: EngineLoadTarget) {
    this.#router = router
  }

  #set(id: string, inFlight: number | undefined, prefill: number | undefined): boolean {
    const was = this.#by.get(id)
    const b = { inFlight: inFlight ?? was?.inFlight ?? 0, prefill: prefill ?? was?.prefill ?? 0 }
    // Kept only once the router took it: a figure it refuses (throws) must not ride along on
    // the other source's next write, from a timer where nothing catches it.
    const member = this.#router.setEngineLoad(id, b.inFlight, b.prefill)
    // Nothing beyond own leases is no entry: the map holds only members with a figure (an id
    // the router does not have, named by another replica, is not kept: the sharing writes its
    // figures again every heartbeat, so one that joins later gets them then).
    if ((b.inFlight === 0 && b.prefill === 0) || !member) this.#by.delete(id)
    else this.#by.set(id, b)
    return member
  }

  /** Instances with a figure beyond own leases (members only). */
  get size(): number {
    return this.#by.size
  }

  /** The engine's requests from other clients (prefill from the engines: none; the shared figure stays). */
  setEngineInFlight(id: string, inFlight: number): boolean {
    return this.#set(id, inFlight, undefined)
  }

  /** The other replicas' queued prefill at `id`, in the router's blocks. */
  setSharedPrefill(id: string, blocks: number): boolean {
    return this.#set(id, undefined, blocks)
  }

  /** What the scraper writes to: its in-flight figure, this router's own counts. */
  engineSink(): EngineLoadSink {
    return {
      setEngineLoad: (id, inFlight) => this.setEngineInFlight(id, inFlight),
      inFlight: (id) => this.#router.inFlight(id),
    }
  }
}
