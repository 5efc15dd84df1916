// Retiring what has left the configuration without cutting requests short: wait until
// nothing is in flight on it, then close it.
import type { Router } from '../core/router.js'
import type { Instance } from './instance.js'

/** What draining reads of an endpoint: its router's in-flight counters (not the Endpoint, which imports this file). */
interface Draining {
  readonly router: Pick<Router, 'instances' | 'inFlight'>
}

/** Past this, whatever is still in flight is taken to be stuck, and the close goes ahead. */
const MAX_WAIT_MS = 600_000

async function waitUntil(idle: () => boolean, everyMs: number): Promise<void> {
  const deadline = Date.now() + MAX_WAIT_MS
  const settled = () => {
    try {
      return idle()
    } catch {
      return true // the endpoint's router was closed with it: nothing left to wait for
    }
  }
  while (Date.now() < deadline && !settled()) await new Promise((r) => setTimeout(r, everyMs).unref())
}

/** Waits until nothing is in flight on the endpoint, then runs fn. */
export async function drainThen(ep: Draining, fn: () => Promise<void>): Promise<void> {
  await waitUntil(() => !ep.router.instances().some((i) => i.inFlight > 0), 500)
  await fn()
}

/** Waits until the removed instance has nothing in flight (its counter outlives its membership), then closes it. */
export async function closeWhenDrained(ep: Draining, inst: Instance): Promise<void> {
  await waitUntil(() => ep.router.inFlight(inst.id) === 0, 100)
  await inst.close()
}
