// An endpoint's instances as the cluster primary sees them (probes, discovery, ejections),
// published in the endpoint's shared routing state beside the ring (the one channel: a worker
// that picks from a ring reads the instances it names from the same memory) as host-set
// changes (host-log.ts), and how a worker makes its own copy follow them: each worker needs its
// own Instance (its undici pool) for every id a pick can return.
import type { Config } from '../config/config.js'
import { closeWhenDrained } from '../fleet/drain.js'
import type { Endpoint } from '../fleet/endpoint.js'
import type { HostView } from '../fleet/endpoint-events.js'
import { Instance } from '../fleet/instance.js'
import { readHostLog, type HostChange, type HostLogPosition, type HostLogWriter, type HostState } from './host-log.js'

export function hostState(i: Instance): HostState {
  return {
    id: i.id,
    weight: i.weight,
    role: i.role,
    bootstrapPort: i.bootstrapPort,
    declaredModels: i.declaredModels,
    discoveredModels: i.discoveredModels,
    parents: [...i.parents],
    indexBlocks: i.indexBlocks,
    kvCacheBlocks: i.kvCacheBlocks,
    kvBlockTokens: i.kvBlockTokens,
    kvCacheHitRatio: i.kvCacheHitRatio,
    healthy: i.health.healthy,
    lastError: i.health.lastError,
    discoveryError: i.discoveryError,
    failReports: i.health.failReports,
    ejectedUntil: i.outlier.ejectedUntil,
    ejections: i.outlier.ejections,
  }
}

/**
 * The primary's side: the changes go into the shared state before the ring they describe
 * (the owner's sync calls onSync first), so a ring that lists an instance is never read before
 * a record that has it. Nothing is written when nothing changed.
 */
export function publishHosts(ep: HostView, writer: HostLogWriter): void {
  const text = writer.publish([...ep.instances.values()].map(hostState))
  if (text !== undefined) ep.router.fleetRecord.publish(text)
}

/**
 * An instance a worker found unreachable and reported: down in that worker until the primary
 * has taken a report since (its record's failReports passes `seen`); from then on the
 * primary's view governs (down, or already back up if its probes passed).
 */
export interface HeldDown {
  reason: string
  seen: number
}

/** How a worker's endpoint came to its host set, the last time it read the record. */
export type Followed = 'log' | 'snapshot'

/**
 * A worker's copy of one endpoint's host set, following the primary's record: new hosts get a
 * pool, removed ones close once nothing is in flight on them, and health and ejection are
 * copied as the primary decided them, except for hosts held down here (see HeldDown).
 */
export class HostSetFollower {
  readonly #upstream: Config['upstream']
  /** The slot's version last read (0: none), and where in the writer's changes that left us. */
  #version = 0
  #at: HostLogPosition | undefined
  /** Each host as the record last said (a markDown reads the reports the primary had taken). */
  readonly recorded = new Map<string, HostState>()
  readonly #heldDown = new Map<string, HeldDown>()
  /** How the last record read was applied (for tests and the log). */
  last: Followed | undefined

  constructor(upstream: Config['upstream']) {
    this.#upstream = upstream
  }

  /** The position reached: the writer's epoch and the last change applied. */
  get position(): HostLogPosition | undefined {
    return this.#at
  }

  /**
   * Reads the endpoint's record if the primary has published since; true when that changed
   * the host set (then the endpoint has synced). A torn record is left unread: the next
   * publication rewrites it whole.
   */
  follow(ep: Endpoint): boolean {
    const got = ep.router.fleetRecord.read(this.#version)
    if (got === undefined) return false
    const read = readHostLog(got.text, this.#at)
    if (read === 'torn') return false
    this.#version = got.version
    if (read === 'current') return false
    if (read.from === 'snapshot') this.#reset(ep, read.hosts)
    for (const c of read.changes) this.#apply(ep, c)
    this.#at = read.head
    this.last = read.from
    ep.sync()
    return true
  }

  /** Keeps the instance down here until the record shows the primary took a report after the worker's. */
  hold(id: string, reason: string): boolean {
    const recorded = this.recorded.get(id)
    if (recorded === undefined) return false // gone from the primary's record: no pick names it
    this.#heldDown.set(id, { reason, seen: recorded.failReports })
    return true
  }

  /** The set becomes the snapshot's: hosts it lacks leave, the others take its state. */
  #reset(ep: Endpoint, hosts: HostState[]): void {
    const wanted = new Set(hosts.map((s) => s.id))
    this.#apply(ep, { seq: 0, added: hosts, updated: [], removed: [...ep.instances.keys()].filter((id) => !wanted.has(id)) })
  }

  #apply(ep: Endpoint, c: HostChange): void {
    for (const id of c.removed) {
      this.recorded.delete(id)
      this.#heldDown.delete(id)
      const inst = ep.instances.get(id)
      if (inst === undefined) continue
      ep.instances.delete(id)
      void closeWhenDrained(ep, inst)
    }
    for (const s of [...c.added, ...c.updated]) this.#take(ep, s)
  }

  #take(ep: Endpoint, s: HostState): void {
    this.recorded.set(s.id, s)
    let inst = ep.instances.get(s.id)
    if (inst === undefined) {
      inst = new Instance(s.id, s.weight, s.declaredModels, this.#upstream, s.indexBlocks)
      ep.instances.set(s.id, inst)
    }
    inst.weight = s.weight
    inst.role = s.role
    inst.bootstrapPort = s.bootstrapPort
    inst.declaredModels = s.declaredModels
    if (s.discoveredModels !== undefined) inst.setDiscoveredModels({ ids: s.discoveredModels, parents: new Map(s.parents) })
    inst.indexBlocks = s.indexBlocks
    inst.kvCacheBlocks = s.kvCacheBlocks
    inst.kvBlockTokens = s.kvBlockTokens
    inst.kvCacheHitRatio = s.kvCacheHitRatio
    inst.health.healthy = s.healthy
    inst.health.lastError = s.lastError
    inst.discoveryError = s.discoveryError
    const held = this.#heldDown.get(s.id)
    if (held !== undefined && s.failReports > held.seen) this.#heldDown.delete(s.id)
    else if (held !== undefined) {
      inst.health.healthy = false
      inst.health.lastError = held.reason
    }
    inst.outlier.ejectedUntil = s.ejectedUntil
    inst.outlier.ejections = s.ejections
  }
}
