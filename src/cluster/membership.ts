// An endpoint's instances as the cluster primary sees them (probes, discovery, ejections),
// in a form that crosses the IPC channel, and how a worker makes its own copy match: each
// worker needs its own Instance (its undici pool) for every id a pick can return.
import type { Config } from '../config/config.js'
import { closeWhenDrained } from '../fleet/drain.js'
import type { Endpoint } from '../fleet/endpoint.js'
import { Instance } from '../fleet/instance.js'

export interface InstanceState {
  id: string
  weight: number
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
  ejectedUntil: number
  ejections: number
}

export interface Membership {
  endpoint: string
  instances: InstanceState[]
}

export function membershipOf(ep: Endpoint): Membership {
  return {
    endpoint: ep.name,
    instances: [...ep.instances.values()].map((i) => ({
      id: i.id,
      weight: i.weight,
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
      ejectedUntil: i.outlier.ejectedUntil,
      ejections: i.outlier.ejections,
    })),
  }
}

/**
 * Makes the worker's instances of `ep` those of `m`: new ones get a pool, gone ones close
 * once nothing is in flight on them, and health and ejection are copied as the primary
 * decided them. Then the endpoint syncs, which refreshes what its picks read.
 */
export function applyMembership(ep: Endpoint, m: Membership, upstream: Config['upstream']): void {
  const wanted = new Set(m.instances.map((s) => s.id))
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
    inst.declaredModels = s.declaredModels
    if (s.discoveredModels !== undefined) inst.setDiscoveredModels({ ids: s.discoveredModels, parents: new Map(s.parents) })
    inst.indexBlocks = s.indexBlocks
    inst.kvCacheBlocks = s.kvCacheBlocks
    inst.kvBlockTokens = s.kvBlockTokens
    inst.kvCacheHitRatio = s.kvCacheHitRatio
    inst.health.healthy = s.healthy
    inst.health.lastError = s.lastError
    inst.discoveryError = s.discoveryError
    inst.outlier.ejectedUntil = s.ejectedUntil
    inst.outlier.ejections = s.ejections
  }
  ep.sync()
}
