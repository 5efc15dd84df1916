// A plain Router (the library's) as the scheduler's picker, for fleets that are a list of ids and
// roles rather than serve's endpoints: the replay's lanes, a gateway embedding the library. Its
// members must list the groups groupsOf() gives them (routerMembers does).
import { NoInstanceError, type Lease, type Router } from '../core/router.js'
import { RequestError } from '../core/errors.js'
import { plays, type Role } from '../config/disaggregation.js'
import { ANY_MODEL, groupName, groupsOf, legGroup, type Leg } from '../fleet/groups.js'
import type { InstanceSpec } from '../core/options.js'
import type { Chosen, LegPicker, RequestView } from './types.js'
import { APPROX_BYTES_PER_TOKEN, reportedLeadTokens } from './uncached.js'

export interface RoleMember {
  id: string
  role: Role
  weight?: number
  indexBlocks?: number
}

/** The Router's members for a fleet with roles: each lists its leg groups (models unknown: any model). */
export function routerMembers(members: readonly RoleMember[]): InstanceSpec[] {
  const disaggregated = members.some((m) => m.role !== 'both')
  return members.map((m) => ({
    id: m.id,
    ...(m.weight !== undefined && { weight: m.weight }),
    ...(m.indexBlocks !== undefined && { indexBlocks: m.indexBlocks }),
    groups: groupsOf([], m.role, disaggregated),
  }))
}

export class RouterLegPicker implements LegPicker<string> {
  #roles = new Map<string, Role>()
  #disaggregated = false

  /** `blockBytes`: the router's routing.blockSize (bytes of routing text per block). */
  constructor(
    readonly router: Router,
    members: readonly RoleMember[],
    readonly blockBytes: number,
    /** Extra pick options (the replay's virtual clock for the exact view). */
    readonly now?: () => number,
  ) {
    this.setMembers(members)
  }

  /** The fleet's members changed: the router's membership follows. */
  setMembers(members: readonly RoleMember[]): void {
    this.#roles = new Map(members.map((m) => [m.id, m.role]))
    this.#disaggregated = members.some((m) => m.role !== 'both')
    this.router.setInstances(routerMembers(members))
  }

  get disaggregated(): boolean {
    return this.#disaggregated
  }

  get blockTokens(): number {
    return this.blockBytes / APPROX_BYTES_PER_TOKEN
  }

  queuedPrefillTokens(instance: string): number {
    const row = this.router.instances().find((i) => i.id === instance)
    return row === undefined ? 0 : (row.queuedPrefillBlocks + row.engineQueuedPrefillBlocks) * this.blockTokens
  }

  inFlight(instance: string): number {
    const row = this.router.instances().find((i) => i.id === instance)
    return row === undefined ? 0 : row.inFlight + row.engineInFlight
  }

  leastQueuedPrefillTokens(leg: Leg): number {
    let least = Infinity
    for (const row of this.router.instances()) {
      const role = this.#roles.get(row.id)
      if (role === undefined || !plays(role, leg)) continue
      least = Math.min(least, (row.queuedPrefillBlocks + row.engineQueuedPrefillBlocks) * this.blockTokens)
    }
    return least
  }

  reportedTokens(view: RequestView): ((instance: string) => number) | undefined {
    return reportedLeadTokens(this.router, view, this.now?.())
  }

  pick(view: RequestView, leg: Leg | undefined, avoid?: readonly Lease[], alternates?: number): Chosen<string> {
    const on: Leg | undefined = this.#disaggregated ? (leg ?? 'decode') : undefined
    const group = on === undefined ? ANY_MODEL : legGroup(on)
    if (on !== undefined && ![...this.#roles.values()].some((r) => plays(r, on))) {
      throw new RequestError(`no_${on}_instance`, `no ${on} instance in the fleet`, 503)
    }
    try {
      const lease = this.router.pick(view.key, {
        tenant: view.tenant,
        anchor: view.anchor,
        group: on === undefined ? groupName(group, undefined) : group,
        ...(avoid !== undefined && { avoid }),
        ...(view.exact !== undefined && { tokens: view.exact, ...(this.now !== undefined && { now: this.now() }) }),
        ...(alternates !== undefined && { alternates }),
      })
      return { lease, instance: lease.instance }
    } catch (err) {
      if (err instanceof NoInstanceError && on !== undefined) throw new RequestError(`no_${on}_instance`, `no ${on} instance can take the request`, 503)
      throw err
    }
  }
}
