// Instances by role, as Prometheus sees them: read from the endpoints at scrape time. Every
// series is set on every scrape (0 included), so that an alert compares values instead of
// asking whether a series exists.
import { Gauge, type Registry } from 'prom-client'
import { ROLES } from '../config/disaggregation.js'
import type { Endpoint } from '../fleet/endpoint.js'
import { roleGap } from '../fleet/roles.js'

export function registerRoleMetrics(endpoints: () => Iterable<Endpoint>, registers: Registry[]): void {
  new Gauge({
    name: 'prefix_router_instances',
    help: "Instances per endpoint by role (prefill, decode, both) and state (healthy: passes health checks and is not ejected, it receives traffic; unhealthy: the others).",
    labelNames: ['endpoint', 'role', 'state'],
    registers,
    collect() {
      this.reset()
      for (const ep of endpoints()) {
        const all = [...ep.instances.values()]
        for (const role of ROLES) {
          const mine = all.filter((i) => i.role === role)
          const healthy = mine.filter((i) => i.inRotation).length
          this.set({ endpoint: ep.name, role, state: 'healthy' }, healthy)
          this.set({ endpoint: ep.name, role, state: 'unhealthy' }, mine.length - healthy)
        }
      }
    },
  })
  new Gauge({
    name: 'prefix_router_role_missing',
    help:
      "1 when an endpoint has instances of one leg and none that can play the other: role=prefill, decode instances but no prefill (or both) instance (requests run whole on them, or fail with whenNoPrefill: fail); " +
      'role=decode, prefill instances but no decode (or both) instance (requests cannot be served). 0 otherwise. Counted over all the instances, healthy or not, and those joining.',
    labelNames: ['endpoint', 'role'],
    registers,
    collect() {
      this.reset()
      for (const ep of endpoints()) {
        const gap = roleGap(ep.roleCounts())
        for (const role of ['prefill', 'decode'] as const) this.set({ endpoint: ep.name, role }, gap === role ? 1 : 0)
      }
    },
  })
}
