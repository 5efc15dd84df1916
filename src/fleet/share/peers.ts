// The other replicas, as their latest messages say: each one's queued prefill per instance,
// and the sum over them that this replica counts as load beyond its own. A replica silent for
// expireMs is dropped, so a replica killed without a goodbye stops counting within that time.
import type { Figures, LoadMessage } from './message.js'
import type { SharedLoadSink } from './sink.js'

interface Peer {
  replica: string
  seq: number
  ts: number
  /** performance.now() when its latest message arrived: ages are on this clock, not the sender's. */
  heardAt: number
  endpoints: Figures
  inFlight: Figures | undefined
}

export interface PeerReport {
  replica: string
  /** Milliseconds since its latest message arrived. */
  ageMs: number
  seq: number
  /** Its own clock when it sent that message (ISO). */
  sentAt: string
  /** Its queued prefill, in blocks, per endpoint and instance. */
  prefillBlocks: Figures
  inFlight: Figures | null
}

/** A figure, read as an own property only: names come from the channel ("__proto__" among them). */
function figure(f: Figures, ep: string, id: string): number {
  if (!Object.hasOwn(f, ep)) return 0
  const row = f[ep]!
  return Object.hasOwn(row, id) ? row[id]! : 0
}

export type Accepted = 'own' | 'new' | 'update' | 'bye' | 'restarted'

export class PeerTable {
  readonly #self: string
  readonly #sink: SharedLoadSink
  readonly #peers = new Map<string, Peer>()
  /** The sums as last written to the sink: endpoint -> instance -> blocks (zeros left out). */
  readonly #shared = new Map<string, Map<string, number>>()

  constructor(self: string, sink: SharedLoadSink) {
    this.#self = self
    this.#sink = sink
  }

  get size(): number {
    return this.#peers.size
  }

  /** Takes one decoded message; the sums of what it changed go to the sink at once. */
  accept(m: LoadMessage, now: number): Accepted {
    if (m.replica === this.#self) return 'own'
    const old = this.#peers.get(m.replica)
    if (m.bye) {
      if (old !== undefined) this.#drop(old)
      return 'bye'
    }
    const peer: Peer = { replica: m.replica, seq: m.seq, ts: m.ts, heardAt: now, endpoints: m.endpoints, inFlight: m.inFlight }
    this.#peers.set(m.replica, peer)
    this.#resum(old?.endpoints, peer.endpoints)
    if (old === undefined) return 'new'
    // Redis delivers one publisher's messages in order: a sequence going back is a restart
    // under the same --replica-id, or two replicas given one id.
    return m.seq <= old.seq ? 'restarted' : 'update'
  }

  /** Drops the peers silent since before `now - expireMs`; returns their ids. */
  expire(now: number, expireMs: number): string[] {
    const gone: string[] = []
    for (const p of this.#peers.values()) {
      if (now - p.heardAt > expireMs) {
        gone.push(p.replica)
        this.#drop(p)
      }
    }
    return gone
  }

  /** Writes every non-zero sum again: a router whose membership changed since has them too. */
  rewrite(): void {
    for (const [ep, row] of this.#shared) for (const [id, n] of row) this.#sink.setSharedPrefill(ep, id, n)
  }

  /** The sums: endpoint -> instance -> the other replicas' queued prefill (zeros left out). */
  shared(): Figures {
    // fromEntries defines own properties: a name such as "__proto__" stays a name.
    return Object.fromEntries([...this.#shared].map(([ep, row]) => [ep, Object.fromEntries(row)]))
  }

  /** Peers heard from, with their ages. */
  report(now: number): PeerReport[] {
    return [...this.#peers.values()]
      .map((p) => ({
        replica: p.replica,
        ageMs: Math.max(0, Math.round(now - p.heardAt)),
        seq: p.seq,
        sentAt: new Date(p.ts).toISOString(),
        prefillBlocks: p.endpoints,
        inFlight: p.inFlight ?? null,
      }))
      .sort((a, b) => (a.replica < b.replica ? -1 : 1))
  }

  /** Forgets every peer (closing): their figures go to 0. */
  clear(): void {
    for (const p of [...this.#peers.values()]) this.#drop(p)
  }

  #drop(p: Peer): void {
    this.#peers.delete(p.replica)
    this.#resum(p.endpoints, undefined)
  }

  /** Sums again the instances a peer's figures went from `before` to `after` on, and writes those that changed. */
  #resum(before: Figures | undefined, after: Figures | undefined): void {
    const touched = new Map<string, Set<string>>()
    for (const f of [before, after]) {
      if (f === undefined) continue
      for (const ep of Object.keys(f)) {
        let s = touched.get(ep)
        if (s === undefined) touched.set(ep, (s = new Set()))
        for (const id of Object.keys(f[ep]!)) s.add(id)
      }
    }
    for (const [ep, ids] of touched) {
      let row = this.#shared.get(ep)
      for (const id of ids) {
        let sum = 0
        for (const p of this.#peers.values()) sum += figure(p.endpoints, ep, id)
        const was = row?.get(id) ?? 0
        if (sum === was) continue
        if (sum === 0) row?.delete(id)
        else {
          if (row === undefined) this.#shared.set(ep, (row = new Map()))
          row.set(id, sum)
        }
        this.#sink.setSharedPrefill(ep, id, sum)
      }
      if (row?.size === 0) this.#shared.delete(ep)
    }
  }
}
