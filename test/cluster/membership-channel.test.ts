// `--workers N`: a worker's instances come from the primary, through the endpoint's shared
// state alone. These run the primary's endpoint and a worker's in one process over one shared
// router, the way the two processes do, with the worker's messages to the primary held back and
// no timer run, so the interleavings a busy machine makes rare happen every time: the worker
// picks right after the primary publishes, and before the primary hears what the worker saw.
import { afterEach, describe, expect, it } from 'vitest'
import { parseConfig, type Config } from '../../src/config/config.js'
import { RequestError } from '../../src/core/errors.js'
import { Router } from '../../src/core/router.js'
import { HostLogWriter } from '../../src/cluster/host-log.js'
import { publishHosts } from '../../src/cluster/membership.js'
import type { ToPrimary } from '../../src/cluster/messages.js'
import { WorkerFleet } from '../../src/cluster/worker-fleet.js'
import type { WorkerEndpoint } from '../../src/cluster/worker-endpoint.js'
import type { Endpoint } from '../../src/fleet/endpoint.js'
import { LocalEndpoint } from '../../src/fleet/local-endpoint.js'

const A = 'http://127.0.0.1:9'
const B = 'http://127.0.0.2:9'
const C = 'http://127.0.0.3:9'

function config(urls: string[], extra: Record<string, Record<string, unknown>> = {}): Config {
  return parseConfig({
    listen: { host: '127.0.0.1', port: 0 },
    health: { intervalMs: 0 },
    discovery: { modelsIntervalMs: 0, metricsIntervalMs: 0 },
    endpoints: [{ name: 'default', instances: urls.map((url) => ({ url, models: ['m'], ...extra[url] })) }],
  })
}

const open: Endpoint[] = []
const fleets: WorkerFleet[] = []
afterEach(async () => {
  for (const f of fleets.splice(0)) f.close()
  // Workers first: their routers are attached to the primary's state.
  for (const ep of open.splice(0).reverse()) await ep.close()
})

interface Pair {
  primary: Endpoint
  worker: WorkerEndpoint
  /** What the worker sent the primary, not delivered (the IPC channel held back). */
  toPrimary: ToPrimary[]
}

function pair(urls: string[], extra: Record<string, Record<string, unknown>> = {}): Pair {
  const c = config(urls, extra)
  // As ClusterPrimary does: the record published as the endpoint syncs, before its ring.
  const writer = new HostLogWriter()
  const primary = new LocalEndpoint(c, c.endpoints[0]!, { router: (_name, options) => new Router({ ...options, shared: true }), onSync: (ep) => publishHosts(ep, writer) })
  open.push(primary)
  primary.sync()
  const toPrimary: ToPrimary[] = []
  const fleet = new WorkerFleet({ default: primary.router.sharedPath! }, (m) => void toPrimary.push(m))
  fleets.push(fleet)
  const worker = fleet.build(c, c.endpoints[0]!, {})
  open.push(worker)
  return { primary, worker, toPrimary }
}

/** The instance a request with this key goes to, or the code it is refused with. */
function pickFor(ep: Endpoint, key: string): string {
  try {
    const { lease, instance } = ep.pick(key, undefined, 'm')
    lease.release()
    return instance.id
  } catch (err) {
    if (err instanceof RequestError) return `${err.status} ${err.code}`
    throw err
  }
}

const keys = Array.from({ length: 64 }, (_, i) => `prompt ${i}`)

describe('--workers: the membership a worker picks from', () => {
  it('a worker picks an instance the primary has just added, before anything but the shared state reached it', () => {
    const { primary, worker } = pair([A])
    expect(keys.map((k) => pickFor(worker, k)).every((id) => id === A)).toBe(true)
    const next = config([A, B])
    primary.update(next, next.endpoints[0]!)
    // The shared ring has B now; the worker has been told nothing else.
    const got = keys.map((k) => pickFor(worker, k))
    expect(got.filter((id) => id !== A && id !== B)).toEqual([])
    expect(got).toContain(B)
  })

  it("a worker's markDown takes the instance out of its own picks at once, and keeps it out until the primary has taken the report", () => {
    const { primary, worker, toPrimary } = pair([A, B])
    const onB = keys.filter((k) => pickFor(worker, k) === B)
    expect(onB.length).toBeGreaterThan(0)
    worker.markDown(worker.instances.get(B)!, 'connection refused')
    expect(toPrimary).toContainEqual({ prefixRouter: 'down', endpoint: 'default', instance: B, reason: 'connection refused' })
    // The primary has not heard of it (the message is held back): the shared ring still lists B.
    expect(onB.map((k) => pickFor(worker, k))).toEqual(onB.map(() => A))
    // The primary publishes something else meanwhile (C joins), its record still showing B up.
    const next = config([A, B, C])
    primary.update(next, next.endpoints[0]!)
    expect(onB.map((k) => pickFor(worker, k)).filter((id) => id === B)).toEqual([])
    // The message arrives: the primary takes B out, and puts it back when its probe passes.
    primary.markDown(primary.instances.get(B)!, 'connection refused')
    expect(onB.map((k) => pickFor(worker, k)).filter((id) => id === B)).toEqual([])
    primary.instances.get(B)!.health.probe(true, undefined, { healthyThreshold: 1, unhealthyThreshold: 1 })
    primary.sync()
    expect(keys.map((k) => pickFor(worker, k))).toContain(B)
  })

  it("a worker's instances have the roles and bootstrap ports the primary's have, and follow a reload that changes them", () => {
    const { primary, worker } = pair([A, B, C], { [A]: { role: 'prefill', bootstrapPort: 8998 }, [B]: { role: 'decode' } })
    // The worker reads the record as it attaches, then on its timer (run here by hand).
    const roles = (ep: Endpoint) => [...ep.instances.values()].map((i) => `${i.id} ${i.role} ${i.bootstrapPort ?? '-'}`).sort()
    expect(roles(worker)).toEqual([`${A} prefill 8998`, `${B} decode -`, `${C} both -`])
    const next = config([A, B, C], { [A]: { role: 'prefill' }, [C]: { role: 'decode' } })
    primary.update(next, next.endpoints[0]!)
    expect(worker.follow()).toBe(true)
    expect(roles(worker)).toEqual([`${A} prefill -`, `${B} both -`, `${C} decode -`])
    expect(roles(worker)).toEqual(roles(primary))
  })
})
