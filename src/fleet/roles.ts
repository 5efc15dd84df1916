// An endpoint's instances by role, and what a mix that cannot disaggregate means: decode
// instances with no instance to prefill for them, or prefill instances with none to decode.
// Counted over the members, healthy or not (and those joining): the warning is about what the
// configuration and discovery give, which the gauges of health do not show.
import type { Logger } from 'pino'
import { ROLES, type DisaggregationConfig, type Role } from '../config/disaggregation.js'

export type RoleCounts = Record<Role, number>

export function roleCounts(instances: Iterable<{ role: Role }>): RoleCounts {
  const n: RoleCounts = { prefill: 0, decode: 0, both: 0 }
  for (const i of instances) n[i.role]++
  return n
}

/** Some instance has a role other than both: the endpoint is meant to disaggregate. */
export function hasRoles(n: RoleCounts): boolean {
  return n.prefill + n.decode > 0
}

/** The leg no instance can play, when instances of the other leg need it. */
export type RoleGap = 'prefill' | 'decode'

export function roleGap(n: RoleCounts): RoleGap | undefined {
  if (n.decode > 0 && n.prefill + n.both === 0) return 'prefill'
  if (n.prefill > 0 && n.decode + n.both === 0) return 'decode'
  return undefined
}

/** What the gap means for requests, said as the warning says it. */
export function roleGapMessage(endpoint: string, n: RoleCounts, gap: RoleGap, whenNoPrefill: DisaggregationConfig['whenNoPrefill']): string {
  if (gap === 'prefill') {
    const then = whenNoPrefill === 'fail' ? 'requests fail with 503 (whenNoPrefill: fail)' : 'requests run whole on the decode instances'
    return `endpoint ${endpoint} has ${n.decode} decode instance(s) but no prefill instance: ${then}`
  }
  return `endpoint ${endpoint} has ${n.prefill} prefill instance(s) but no decode instance: requests cannot be served: no decode instance`
}

/** "2 prefill + 2 decode" (and "+ 1 both"), the roles present only. */
export function describeRoles(n: RoleCounts): string {
  return ROLES.filter((r) => n[r] > 0)
    .map((r) => `${n[r]} ${r}`)
    .join(' + ')
}

/**
 * Warns when an endpoint's mix of roles comes to have a gap (at start, after a reload, as
 * discovery changes it) and says when it is whole again: once per change, not per sync.
 */
export class RoleWatch {
  #gap: RoleGap | undefined
  constructor(
    private readonly endpoint: string,
    private readonly log: Logger,
  ) {}

  check(n: RoleCounts, whenNoPrefill: DisaggregationConfig['whenNoPrefill']): void {
    const gap = roleGap(n)
    if (gap === this.#gap) return
    const was = this.#gap
    this.#gap = gap
    if (gap !== undefined) this.log.warn({ roles: n, missing: gap }, roleGapMessage(this.endpoint, n, gap, whenNoPrefill))
    else if (was !== undefined) this.log.info({ roles: n }, `endpoint ${this.endpoint} has instances for prefill and decode again`)
  }
}
