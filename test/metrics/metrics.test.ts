// The metrics read from the routing state at scrape time carry what the state says.
import { describe, expect, it } from 'vitest'
import type { Endpoint } from '../../src/fleet/endpoint.js'
import { RouterMetrics } from '../../src/metrics/router-metrics.js'

/** An endpoint as the metrics read it: a name, no instances (no role counted), and a router's stats. */
function endpointWith(name: string, leasesCollected: number): Endpoint {
  return { name, instances: new Map(), roleCounts: () => ({ prefill: 0, decode: 0, both: 0 }), router: { instances: () => [], stats: () => ({ leasesCollected }) } } as unknown as Endpoint
}

describe('prefix_router_leases_collected_total', () => {
  it("reports each endpoint's count of leases the garbage collector released", async () => {
    let collected = 0
    const metrics = new RouterMetrics(() => [endpointWith('default', collected), endpointWith('other', 2)], undefined, { processMetrics: false })
    expect(await metrics.registry.metrics()).toContain('prefix_router_leases_collected_total{endpoint="default"} 0')
    collected = 3
    const text = await metrics.registry.metrics()
    expect(text).toContain('prefix_router_leases_collected_total{endpoint="default"} 3')
    expect(text).toContain('prefix_router_leases_collected_total{endpoint="other"} 2')
  })

  it("is left to the process that reports the fleet's gauges", async () => {
    const metrics = new RouterMetrics(() => [endpointWith('default', 1)], undefined, { processMetrics: false, fleet: false })
    expect(await metrics.registry.metrics()).not.toContain('prefix_router_leases_collected_total')
  })
})
