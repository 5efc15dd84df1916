// The instances a view picks from, and what its picks read of them on every request (the ones
// in rotation, each requested model's router group), cached until the set next changes. The
// owner of the membership writes the set in the process that owns the fleet; a cluster worker
// writes its own copy from the shared region. Either way, `changed()` follows every write.
import { plays } from '../config/disaggregation.js'
import { ANY_MODEL, groupName, type Leg } from './groups.js'
import type { Instance } from './instance.js'

/** A model some instance serves, none of them in rotation. */
export const MODEL_DOWN = 0
/** A model no instance of the endpoint serves. */
export const MODEL_UNKNOWN = 1
/** A model the endpoint serves, but no instance playing the leg asked for does. */
export const LEG_MISSING = 2

/** A router group, with the id the router's pick takes for it (Router.groupId). */
export interface RouterGroup {
  name: string
  id: number
}

export type GroupOrWhyNot = RouterGroup | typeof MODEL_DOWN | typeof MODEL_UNKNOWN | typeof LEG_MISSING

/** Models remembered between changes: names come from clients, so the map is bounded. */
const MAX_GROUPS = 1024

export class HostSet {
  readonly instances = new Map<string, Instance>()
  #healthy: readonly Instance[] | undefined
  #groups = new Map<string, GroupOrWhyNot>()
  /** Some instance plays prefill or decode only: requests may run over two instances (see groups.ts). */
  #disaggregated = false

  /** The set was written (membership, health, ejection, models): what picks read is read again. */
  changed(): void {
    this.#healthy = undefined
    this.#groups.clear()
    this.#disaggregated = [...this.instances.values()].some((i) => i.role !== 'both')
  }

  /** Instances the router may choose: healthy and not ejected, as of the last change. */
  healthy(): readonly Instance[] {
    return (this.#healthy ??= [...this.instances.values()].filter((i) => i.inRotation))
  }

  get disaggregated(): boolean {
    return this.#disaggregated
  }

  /** Instances in rotation playing `leg` (any instance for undefined). */
  healthyFor(leg: Leg | undefined): readonly Instance[] {
    const h = this.healthy()
    return leg === undefined ? h : h.filter((i) => plays(i.role, leg))
  }

  /** The router group of a request for `model` on `leg`, or why no instance can take it; `groupId` names a group to the router. */
  groupOf(model: string, leg: Leg | undefined, groupId: (name: string) => number): GroupOrWhyNot {
    const key = groupName(model, leg)
    let g = this.#groups.get(key)
    if (g !== undefined) return g
    const playing = (i: Instance) => leg === undefined || plays(i.role, leg)
    const healthy = this.healthy().filter(playing)
    const all = [...this.instances.values()]
    if (healthy.some((i) => i.serves(model))) g = { name: key, id: groupId(key) }
    else if (healthy.some((i) => !i.knowsModels())) g = { name: groupName(ANY_MODEL, leg), id: groupId(groupName(ANY_MODEL, leg)) }
    else if (all.some((i) => playing(i) && i.serves(model))) g = MODEL_DOWN
    else if (leg !== undefined && all.some((i) => i.serves(model) || !i.knowsModels())) g = LEG_MISSING
    else g = MODEL_UNKNOWN
    if (this.#groups.size >= MAX_GROUPS) this.#groups.clear()
    this.#groups.set(key, g)
    return g
  }

  /** Whether `model` is a LoRA adapter here (its blocks are keyed by its name). */
  isAdapter(model: string | undefined): boolean {
    if (model === undefined) return false
    for (const i of this.instances.values()) if (i.parents.get(model) !== undefined) return true
    return false
  }

  /** Models served here: base models and adapters (with their parent), for GET /v1/models. */
  models(): { id: string; parent: string | undefined }[] {
    const out = new Map<string, string | undefined>()
    for (const inst of this.instances.values()) {
      for (const m of inst.models()) if (!out.has(m)) out.set(m, inst.parents.get(m))
    }
    return [...out].map(([id, parent]) => ({ id, parent }))
  }
}
