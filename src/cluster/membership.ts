// An endpoint's instances as the cluster primary sees them (probes, discovery, ejections),
// published in the endpoint's shared routing state beside the ring (the one channel: a worker
// that picks from a ring reads the instances it names from the same memory), and how a worker
// makes its own copy match: each worker needs its own Instance (its undici pool) for every id
// a pick can return.
import type { Config } from '../config/config.js'
import { closeWhenDrained } from '../fleet/drain.js'
import type { Endpoint } from '../fleet/endpoint.js'
import type { HostView } from '../fleet/endpoint-events.js'
import { Instance } from '../fleet/instance.js'
import type { Role } from '../config/disaggregation.js'

export interface InstanceState {
  id: string
  weight: number
  /** Its role in a disaggregated fleet, and its bootstrap port (SGLang's connector): a worker's picks read them. */
  role: Role
  bootstrapPort: number | undefined
  declaredModels: string[]
  discoveredModels: string[] | undefined
  parents: [string, string][]
  indexBlocks: number | undefined
  kvCacheBlocks: number | undefined
  kvBlockTokens: number | undefined
  kvCacheHitRatio: number | undefined
  healthy: boolean
  lastError: string | undefined
  /** Why its models cannot be discovered (a refused probe), for the workers' /admin/instances. */
  discoveryError: string | undefined
  /** Reports of traffic proving it down the primary has taken (Health.failReports). */
  failReports: number
  ejectedUntil: number
  ejections: number
}

export interface Membership {
  endpoint: string
  instances: InstanceState[]
}

export function membershipOf(ep: HostView): Membership {
  return {
    endpoint: ep.name,
    instances: [...ep.instances.values()].map((i) => ({
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
    })),
  }
}

/**
 * The primary's side: the record goes into the shared state before the ring it describes
 * (Endpoint.sync calls onSync first), so a ring that lists an instance is never read before
 * a record that has it. `last` is the text this router was last given, to skip a rewrite.
 */
export function publishMembership(ep: HostView, last: string | undefined): string {
  const text = JSON.stringify(membershipOf(ep))
  if (text !== last) ep.router._publishFleet(text)
  return text
}

/** The worker's side: the record, when its version is not `since`; undefined too for one that does not parse (torn by a primary that died writing it). */
export function readMembership(ep: Endpoint, since: number): { version: number; membership: Membership } | undefined {
  const got = ep.router._fleet(since)
  if (got === undefined) return undefined
  try {
    return { version: got.version, membership: JSON.parse(got.text) as Membership }
  } catch {
    return undefined
  }
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

/**
 * Makes the worker's instances of `ep` those of `m`: new ones get a pool, gone ones close
 * once nothing is in flight on them, and health and ejection are copied as the primary
 * decided them, except for instances in `heldDown` (by id), which stay down until the record
 * shows the primary took a report after the worker's. Then the endpoint syncs, which
 * refreshes what its picks read.
 */
export function applyMembership(ep: Endpoint, m: Membership, upstream: Config['upstream'], heldDown: Map<string, HeldDown> = new Map()): void {
  const wanted = new Set(m.instances.map((s) => s.id))
  for (const id of heldDown.keys()) if (!wanted.has(id)) heldDown.delete(id)
  for (const [id, inst] of ep.instances) {
    if (wanted.has(id)) continue
    ep.instances.delete(id)
    void closeWhenDrained(ep, inst)
  }
  for (const s of m.instances) {
    let inst = ep.instances.get(s.id)
    if (inst === undefined) {
      inst = new Instance(s.id, s.weight, s.declaredModels, upstream, s.indexBlocks)
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
    const held = heldDown.get(s.id)
    if (held !== undefined && s.failReports > held.seen) heldDown.delete(s.id)
    else if (held !== undefined) {
      inst.health.healthy = false
      inst.health.lastError = held.reason
    }
    inst.outlier.ejectedUntil = s.ejectedUntil
    inst.outlier.ejections = s.ejections
  }
  ep.sync()
}
