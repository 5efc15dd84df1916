// GET /admin/status: everything the status page (GET /) shows, in one answer, so that one poll
// draws one consistent picture: this replica, each endpoint's instances (as /admin/instances
// has them, with their roles), the sharing of queued prefill between replicas, and the last
// decisions.
import { readFileSync } from 'node:fs'
import type { AdminView } from './admin-view.js'
import type { Decision } from './decisions.js'

type SharingReport = { state: 'off' } | ({ state: 'connected' | 'disconnected' } & ReturnType<NonNullable<AdminView['shareLoad']>['report']>)

/** The package's version: its package.json is three levels up from src/runtime/admin/ and dist/runtime/admin/ alike. */
const VERSION = (JSON.parse(readFileSync(new URL('../../../package.json', import.meta.url), 'utf8')) as { version: string }).version

/** An endpoint as /admin/instances reports it (admin.ts instancesReport), as far as this reads it. */
interface EndpointReport {
  name: string
  instances: { id: string }[]
}

export interface StatusReport<E extends EndpointReport = EndpointReport> {
  replica: string
  version: string
  pid: number
  /** Seconds since the process started. */
  uptimeS: number
  now: string
  draining: boolean
  endpoints: (Omit<E, 'instances'> & { instances: (E['instances'][number] & { role: string | null })[] })[]
  sharing: SharingReport
  decisions: {
    /** Whether this process routes requests itself; without a front (epp, a --workers primary), none are recorded here. */
    recorded: boolean
    capacity: number
    /** Recorded since start. */
    total: number
    /** Newest first. */
    recent: Decision[]
  }
}

/** The report, from the admin port's view of the router and its /admin/instances endpoints. */
export function statusReport<E extends EndpointReport>(p: AdminView, instances: E[]): StatusReport<E> {
  const endpoints = instances.map((ep) => {
    const live = p.endpoint(ep.name)
    // The role of each instance in a disaggregated fleet (prefill, decode, or both).
    return { ...ep, instances: ep.instances.map((i) => ({ ...i, role: live?.instances.get(i.id)?.role ?? null })) }
  })
  const share = p.shareLoad
  return {
    replica: p.replicaId,
    version: VERSION,
    pid: process.pid,
    uptimeS: Math.round(process.uptime()),
    now: new Date().toISOString(),
    draining: p.draining,
    endpoints,
    sharing: share === undefined ? { state: 'off' } : { state: share.connected ? 'connected' : 'disconnected', ...share.report() },
    decisions: { recorded: p.routesRequests, capacity: p.decisions.capacity, total: p.decisions.total, recent: p.decisions.recent() },
  }
}
