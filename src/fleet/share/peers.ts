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

/**
 * The most replicas whose figures are kept. A real deployment runs a handful; past this, the
 * channel carries something else (a hostile or broken publisher minting ids), and a new id is
 * refused until a peer expires or says goodbye. With the message bounds (MESSAGE_LIMITS) it
 * bounds what the table holds.
 */
export const MAX_PEERS = 64
/**
 * The largest figure taken from one peer (a larger one counts as this), and the largest sum
 * given to the router: 2^32 - 1 blocks is past any engine's queue. Summing MAX_PEERS such
 * figures stays far below 2^53, so the running sums stay exact under every add and subtract.
 */
export const MAX_FIGURE = 0xffffffff

const clamp = (n: number) => (n > MAX_FIGURE ? MAX_FIGURE : n)

/** One instance's sum over the peers: kept as it runs, and as last given to the sink. */
interface Cell {
  sum: number
  written: number
}

/** refused: a new replica past MAX_PEERS (its figures not kept). */
export type Accepted = 'own' | 'new' | 'update' | 'bye' | 'restarted' | 'refused'

export class PeerTable {
  readonly #self: string
  readonly #sink: SharedLoadSink
  readonly #peers = new Map<string, Peer>()
  /**
   * The running sums: endpoint -> instance -> the peers' figures summed (each clamped), and as
   * last written to the sink. A message moves them by what it changes: it costs the instances
   * it and its sender's previous message name, never a pass over the peers. Zeros leave.
   */
  readonly #shared = new Map<string, Map<string, Cell>>()

  constructor(self: string, sink: SharedLoadSink) {
    this.#self = self
    this.#sink = sink
  }

  get size(): number {
    return this.#peers.size
  }

  /** Whether a message from `replica` would be refused: a new id while MAX_PEERS are kept. */
  refuses(replica: string): boolean {
    return this.#peers.size >= MAX_PEERS && replica !== this.#self && !this.#peers.has(replica)
  }

  /** Takes one decoded message; the sums of what it changed go to the sink at once. */
  accept(m: LoadMessage, now: number): Accepted {
    if (m.replica === this.#self) return 'own'
    const old = this.#peers.get(m.replica)
    if (m.bye) {
      if (old !== undefined) this.#drop(old)
      return 'bye'
    }
    if (old === undefined && this.#peers.size >= MAX_PEERS) return 'refused'
    const peer: Peer = { replica: m.replica, seq: m.seq, ts: m.ts, heardAt: now, endpoints: m.endpoints, inFlight: m.inFlight }
    this.#peers.set(m.replica, peer)
    if (old !== undefined) this.#add(old.endpoints, -1)
    this.#add(peer.endpoints, 1)
    if (old !== undefined) this.#write(old.endpoints)
    this.#write(peer.endpoints)
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
    for (const [ep, row] of this.#shared) for (const [id, c] of row) if (c.written !== 0) this.#sink.setSharedPrefill(ep, id, clamp(c.written))
  }

  /** The sums: endpoint -> instance -> the other replicas' queued prefill (zeros left out). */
  shared(): Figures {
    // fromEntries defines own properties: a name such as "__proto__" stays a name.
    return Object.fromEntries([...this.#shared].map(([ep, row]) => [ep, Object.fromEntries([...row].map(([id, c]) => [id, clamp(c.sum)]))]))
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
    this.#add(p.endpoints, -1)
    this.#write(p.endpoints)
  }

  /** Moves the running sums by a peer's figures, added (sign 1) or taken back (-1). */
  #add(f: Figures, sign: 1 | -1): void {
    for (const ep of Object.keys(f)) {
      const ids = f[ep]!
      let row = this.#shared.get(ep)
      if (row === undefined) this.#shared.set(ep, (row = new Map()))
      for (const id of Object.keys(ids)) {
        const n = clamp(ids[id]!)
        if (n === 0) continue
        const c = row.get(id)
        if (c === undefined) row.set(id, { sum: sign * n, written: 0 })
        else c.sum += sign * n
      }
    }
  }

  /** Gives the sink the sums of the instances `f` names that moved since last written; drops the zeros. */
  #write(f: Figures): void {
    for (const ep of Object.keys(f)) {
      const row = this.#shared.get(ep)
      if (row === undefined) continue
      for (const id of Object.keys(f[ep]!)) {
        const c = row.get(id)
        if (c === undefined) continue
        if (c.sum !== c.written) {
          if (clamp(c.sum) !== clamp(c.written)) this.#sink.setSharedPrefill(ep, id, clamp(c.sum))
          c.written = c.sum
        }
        if (c.sum === 0) row.delete(id)
      }
      if (row.size === 0) this.#shared.delete(ep)
    }
  }
}
