// An endpoint of serve's (or the endpoint picker's) fleet as the scheduler's picker: the
// endpoint's filters (model, role, health) and its native strategy.
import type { Lease } from '../core/router.js'
import type { Endpoint } from '../fleet/endpoint.js'
import type { Leg } from '../fleet/groups.js'
import type { Instance } from '../fleet/instance.js'
import type { Chosen, LegPicker, RequestView } from './types.js'
import { APPROX_BYTES_PER_TOKEN, reportedLeadTokens } from './uncached.js'

class EndpointPicker implements LegPicker<Instance> {
  constructor(readonly ep: Endpoint) {}

  get disaggregated(): boolean {
    return this.ep.disaggregated
  }

  get blockTokens(): number {
    return this.ep.routing.blockSize / APPROX_BYTES_PER_TOKEN
  }

  queuedPrefillTokens(instance: Instance): number {
    const row = this.ep.router.instances().find((i) => i.id === instance.id)
    return row === undefined ? 0 : (row.queuedPrefillBlocks + row.engineQueuedPrefillBlocks) * this.blockTokens
  }

  inFlight(instance: Instance): number {
    const row = this.ep.router.instances().find((i) => i.id === instance.id)
    return row === undefined ? 0 : row.inFlight + row.engineInFlight
  }

  leastQueuedPrefillTokens(leg: Leg): number {
    const playing = new Set(this.ep.healthyFor(leg).map((i) => i.id))
    let least = Infinity
    for (const row of this.ep.router.instances()) {
      if (playing.has(row.id)) least = Math.min(least, (row.queuedPrefillBlocks + row.engineQueuedPrefillBlocks) * this.blockTokens)
    }
    return least
  }

  reportedTokens(view: RequestView): ((instance: Instance) => number) | undefined {
    const held = reportedLeadTokens(this.ep.router, view, undefined)
    return held === undefined ? undefined : (i) => held(i.id)
  }

  pick(view: RequestView, leg: Leg | undefined, avoid?: readonly Lease[], alternates?: number): Chosen<Instance> {
    return this.ep.pick(view.key, view.tenant, view.model, view.anchor, avoid, view.exact, leg, alternates)
  }
}

// One per endpoint, made on first use: the request path allocates none.
const pickers = new WeakMap<Endpoint, EndpointPicker>()

export function endpointPicker(ep: Endpoint): LegPicker<Instance> {
  let p = pickers.get(ep)
  if (p === undefined) pickers.set(ep, (p = new EndpointPicker(ep)))
  return p
}
