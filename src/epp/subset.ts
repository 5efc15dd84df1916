// The pick as the endpoint picker makes it: the endpoint's strategy, inside the gateway's
// subset hint when there is one, and the instance named as the protocol wants it (ip:port).
import type { ExactTokens, Lease } from '../core/router.js'
import { RequestError } from '../core/errors.js'
import { echo } from '../core/echo.js'
import type { Endpoint, Pick } from '../fleet/endpoint.js'
import type { Instance } from '../fleet/instance.js'
import type { RequestKey } from '../request/request-key.js'

/** How the protocol names an instance: host:port of its URL (the port its scheme implies when none is written). */
export function hostPort(i: Instance): string {
  const u = i.url
  return `${u.hostname}:${u.port || (u.protocol === 'https:' ? '443' : '80')}`
}

/** Re-picks past instances outside the subset at most this many times (the router's avoid list is this long). */
const MAX_AVOID = 16

export const subsetEmpty = () => new RequestError('subset_empty', 'the gateway sent an empty endpoint subset (x-gateway-destination-endpoint-subset)', 503)
export const subsetNoneEligible = (subset: readonly string[]) =>
  new RequestError('subset_not_eligible', `no ready instance in the endpoint subset the gateway sent: ${subset.slice(0, 8).map(echo).join(', ')}${subset.length > 8 ? ', ...' : ''}`, 503)

/**
 * Picks with the endpoint's strategy; with a subset, only among its members. When the subset
 * holds every ready instance this is the plain pick. Otherwise an instance outside it that the
 * strategy chooses is avoided and the pick made again (its lease released at once), up to
 * MAX_AVOID times.
 */
export function pickIn(ep: Endpoint, k: RequestKey, subset: readonly string[] | undefined, exact: ExactTokens | undefined): Pick {
  if (subset === undefined) return ep.pick(k.key, k.tenant, k.model, k.anchor, undefined, exact)
  if (subset.length === 0) throw subsetEmpty()
  const wanted = new Set(subset)
  const ready = ep.healthy()
  const inside = ready.filter((i) => wanted.has(hostPort(i)))
  if (inside.length === 0) throw subsetNoneEligible(subset)
  if (inside.length === ready.length) return ep.pick(k.key, k.tenant, k.model, k.anchor, undefined, exact)
  const avoid: Lease[] = []
  try {
    for (let n = 0; n <= MAX_AVOID; n++) {
      const p = ep.pick(k.key, k.tenant, k.model, k.anchor, avoid, exact)
      if (wanted.has(hostPort(p.instance))) return p
      avoid.push(p.lease)
    }
    throw subsetNoneEligible(subset)
  } finally {
    for (const l of avoid) l.release()
  }
}
