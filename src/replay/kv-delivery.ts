// A lane's router reads its virtual engines' KV events as a live one does its publishers':
// each batch reaches it `delayMs` of simulated time after the step that produced it.
import type { KvEvent } from '../fleet/events/types.js'
import type { VirtualFleet } from '../sim/virtual-fleet.js'

export type KvDeliver = (instance: number, events: readonly KvEvent[], atMs: number) => void

export function deliverKvEvents(fleet: VirtualFleet, deliver: KvDeliver, delayMs: number): void {
  const clock = fleet.clock
  fleet.engines.forEach((engine, i) => {
    engine.setKvEventListener((events, atMs) => {
      const at = atMs + delayMs
      if (delayMs <= 0) deliver(i, events, at)
      else clock.schedule(at, () => deliver(i, events, at))
    })
  })
}
