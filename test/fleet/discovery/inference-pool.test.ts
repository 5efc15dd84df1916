// Discovery through a Gateway API Inference Extension InferencePool, against an API server
// written here that serves InferencePools (inference.networking.k8s.io/v1) and Pods, each as
// a list with a resourceVersion and then a watch streaming ADDED / MODIFIED / DELETED events,
// one JSON object a line; a watch from a version it has compacted away gets 410 Gone, as a
// real one's would. The pods' IPs are simulator workers on 127.0.0.x, each on two ports.
import { spawn, type ChildProcessWithoutNullStreams } from 'node:child_process'
import http from 'node:http'
import type { AddressInfo } from 'node:net'
import { mkdtempSync, rmSync, writeFileSync } from 'node:fs'
import { tmpdir } from 'node:os'
import { join } from 'node:path'
import { fileURLToPath } from 'node:url'
import { afterAll, afterEach, beforeAll, describe, expect, it } from 'vitest'
import type { ProxyServer } from '../../../src/proxy/proxy.js'
import { startSimFleet, type SimFleet } from '../../../src/sim/index.js'
import { chat, closeRouter, post, until } from '../../proxy/helpers.js'
import { MODEL, members, membershipChange, reached, roles, sourceFailed, startDiscoveryRouter, untilLog, untilMembers, untilRoles, useKubeconfig } from './helpers.js'

interface Meta {
  name: string
  namespace: string
  labels?: Record<string, string>
  resourceVersion?: string
  deletionTimestamp?: string
}
interface Pool {
  apiVersion: 'inference.networking.k8s.io/v1'
  kind: 'InferencePool'
  metadata: Meta
  spec: { selector: { matchLabels: Record<string, string> }; targetPorts: { number: number }[]; endpointPickerRef: { name: string; port: { number: number } } }
}
interface Pod {
  apiVersion: 'v1'
  kind: 'Pod'
  metadata: Meta
  status: { phase: string; podIP?: string; conditions?: { type: string; status: string }[] }
}
type Obj = Pool | Pod
type Watcher = http.ServerResponse & { kind: 'pools' | 'pods'; ns: string; label: string | null; field: string | null }

const POOLS = /^\/apis\/inference\.networking\.k8s\.io\/v1\/namespaces\/([^/]+)\/inferencepools(?:\/([^/]+))?$/
const PODS = /^\/api\/v1\/namespaces\/([^/]+)\/pods$/

/** A fake API server: InferencePools and Pods by namespace, list, get and watch, and what it was asked. */
class FakeApi {
  readonly pools = new Map<string, Pool>()
  readonly pods = new Map<string, Pod>()
  readonly requests: { path: string; query: URLSearchParams; auth: string | undefined }[] = []
  readonly watches = new Set<Watcher>()
  /** While set, every request is answered 500, as an API server in trouble would. */
  failing = false
  /** While set, InferencePools are answered 404, as by a cluster without the CRD. */
  noCrd = false
  /** A watch from a version before this one is answered 410 Gone: the events are no longer kept. */
  compactedBefore = 0
  #rv = 100
  server = http.createServer((req, res) => this.#handle(req, res))

  async listen(): Promise<string> {
    await new Promise<void>((r) => this.server.listen(0, '127.0.0.1', r))
    return `http://127.0.0.1:${(this.server.address() as AddressInfo).port}`
  }

  /** Equality terms only (a=b,c=d): what the router sends. */
  static #selects(selector: string | null, values: Record<string, string | undefined>): boolean {
    return (selector ?? '').split(',').filter(Boolean).every((term) => {
      const i = term.indexOf('=')
      return values[term.slice(0, i)] === term.slice(i + 1)
    })
  }

  #matches(o: Obj, w: { kind: 'pools' | 'pods'; ns: string; label: string | null; field: string | null }): boolean {
    if ((o.kind === 'Pod') !== (w.kind === 'pods') || o.metadata.namespace !== w.ns) return false
    return FakeApi.#selects(w.label, o.metadata.labels ?? {}) && FakeApi.#selects(w.field, { 'metadata.name': o.metadata.name, 'metadata.namespace': o.metadata.namespace })
  }

  #status(res: http.ServerResponse, code: number, message: string): void {
    res.writeHead(code, { 'content-type': 'application/json' })
    res.end(JSON.stringify({ kind: 'Status', apiVersion: 'v1', status: 'Failure', message, code }))
  }

  #handle(req: http.IncomingMessage, res: http.ServerResponse): void {
    const u = new URL(req.url!, 'http://x')
    this.requests.push({ path: u.pathname, query: u.searchParams, auth: req.headers.authorization })
    if (this.failing) return this.#status(res, 500, 'etcd is unhappy')
    const pools = POOLS.exec(u.pathname)
    const pods = PODS.exec(u.pathname)
    if ((!pools && !pods) || (pools && this.noCrd)) return this.#status(res, 404, 'the server could not find the requested resource')
    const kind = pools ? 'pools' : 'pods'
    const ns = (pools ?? pods)![1]!
    if (pools?.[2] !== undefined) {
      const p = this.pools.get(`${ns}/${pools[2]}`)
      if (!p) return this.#status(res, 404, `inferencepools "${pools[2]}" not found`)
      res.writeHead(200, { 'content-type': 'application/json' })
      res.end(JSON.stringify(p))
      return
    }
    const sel = { kind, ns, label: u.searchParams.get('labelSelector'), field: u.searchParams.get('fieldSelector') } as const
    const watch = u.searchParams.get('watch')
    if (watch === 'true' || watch === '1') {
      res.writeHead(200, { 'content-type': 'application/json' })
      const from = Number(u.searchParams.get('resourceVersion') || 0)
      if (from < this.compactedBefore) {
        res.end(`${JSON.stringify({ type: 'ERROR', object: { kind: 'Status', apiVersion: 'v1', status: 'Failure', reason: 'Expired', message: `too old resource version: ${from}`, code: 410 } })}\n`)
        return
      }
      res.flushHeaders()
      const w = Object.assign(res, sel)
      this.watches.add(w)
      res.on('close', () => this.watches.delete(w))
      return
    }
    const items = [...(kind === 'pools' ? this.pools : this.pods).values()].filter((o) => this.#matches(o, sel))
    res.writeHead(200, { 'content-type': 'application/json' })
    res.end(JSON.stringify({ kind: kind === 'pools' ? 'InferencePoolList' : 'PodList', apiVersion: kind === 'pools' ? 'inference.networking.k8s.io/v1' : 'v1', metadata: { resourceVersion: String(this.#rv) }, items }))
  }

  /** Creates or replaces; each watch sees what a real one would (a pod whose labels no longer match is DELETED for it). */
  put(o: Obj, opts: { quiet?: boolean } = {}): void {
    const map = (o.kind === 'Pod' ? this.pods : this.pools) as Map<string, Obj>
    const key = `${o.metadata.namespace}/${o.metadata.name}`
    const old = map.get(key)
    o.metadata.resourceVersion = String(++this.#rv)
    map.set(key, o)
    if (opts.quiet) return
    for (const w of this.watches) {
      const was = old !== undefined && this.#matches(old, w)
      const is = this.#matches(o, w)
      if (is) w.write(`${JSON.stringify({ type: was ? 'MODIFIED' : 'ADDED', object: o })}\n`)
      else if (was) w.write(`${JSON.stringify({ type: 'DELETED', object: o })}\n`)
    }
  }

  delete(kind: 'Pod' | 'InferencePool', name: string, opts: { namespace?: string; quiet?: boolean } = {}): void {
    const map = (kind === 'Pod' ? this.pods : this.pools) as Map<string, Obj>
    const key = `${opts.namespace ?? 'inference'}/${name}`
    const o = map.get(key)!
    map.delete(key)
    o.metadata.resourceVersion = String(++this.#rv)
    if (opts.quiet) return
    for (const w of this.watches) if (this.#matches(o, w)) w.write(`${JSON.stringify({ type: 'DELETED', object: o })}\n`)
  }

  /** The current resourceVersion. */
  get rv(): number {
    return this.#rv
  }

  watching(kind: 'pools' | 'pods', label?: string): number {
    return [...this.watches].filter((w) => w.kind === kind && (label === undefined || w.label === label)).length
  }

  /** Ends the open watches (an API server restarting, say). */
  endWatches(): void {
    for (const w of this.watches) w.end()
    this.watches.clear()
  }

  async close(): Promise<void> {
    this.server.closeAllConnections()
    await new Promise<void>((r) => this.server.close(() => r()))
  }
}

const dir = mkdtempSync(join(tmpdir(), 'pr-discovery-pool-'))
const workers: SimFleet[] = []
/** Two ports every worker host listens on: a pool's target ports. */
let p1: number
let p2: number
let api: FakeApi
let router: ProxyServer | undefined
const url = (n: number, port: number) => `http://127.0.0.${n}:${port}`
/** Hosts 127.0.0.n on both ports, sorted as members() sorts. */
const both = (...ns: number[]) => ns.flatMap((n) => [url(n, p1), url(n, p2)]).sort()
const SOURCE = { type: 'inferencePool', name: 'vllm', namespace: 'inference' }

function pool(selector: Record<string, string>, ports: number[], opts: { name?: string; namespace?: string } = {}): Pool {
  return {
    apiVersion: 'inference.networking.k8s.io/v1',
    kind: 'InferencePool',
    metadata: { name: opts.name ?? 'vllm', namespace: opts.namespace ?? 'inference' },
    spec: { selector: { matchLabels: selector }, targetPorts: ports.map((number) => ({ number })), endpointPickerRef: { name: 'vllm-epp', port: { number: 9002 } } },
  }
}

/** A pod on 127.0.0.n: Running and Ready unless told otherwise. */
function pod(
  n: number,
  opts: { labels?: Record<string, string>; ready?: boolean; phase?: string; ip?: boolean; deleting?: boolean; name?: string; namespace?: string } = {},
): Pod {
  return {
    apiVersion: 'v1',
    kind: 'Pod',
    metadata: {
      name: opts.name ?? `vllm-${n}`,
      namespace: opts.namespace ?? 'inference',
      labels: opts.labels ?? { app: 'vllm' },
      ...(opts.deleting && { deletionTimestamp: '2026-12-01T00:00:00Z' }),
    },
    status: {
      phase: opts.phase ?? 'Running',
      ...(opts.ip !== false && { podIP: `127.0.0.${n}` }),
      conditions: [
        { type: 'Initialized', status: 'True' },
        { type: 'Ready', status: opts.ready === false ? 'False' : 'True' },
      ],
    },
  }
}

beforeAll(async () => {
  // Workers on 127.0.0.6 to .9, each on the same two ports.
  const first = await startSimFleet({ instances: 1, profile: 'tiny', host: '127.0.0.6' })
  const second = await startSimFleet({ instances: 1, profile: 'tiny', host: '127.0.0.6' })
  workers.push(first, second)
  p1 = first.workers[0]!.port
  p2 = second.workers[0]!.port
  for (const n of [7, 8, 9]) for (const port of [p1, p2]) workers.push(await startSimFleet({ instances: 1, profile: 'tiny', host: `127.0.0.${n}`, port }))
})

afterEach(async () => {
  await closeRouter(router, 10_000)
  router = undefined
  await api?.close()
})

afterAll(async () => {
  await Promise.all(workers.map((w) => w.close()))
  rmSync(dir, { recursive: true, force: true })
})

/** A fresh API server, and a kubeconfig pointing at it (a bearer token). */
async function startApi(): Promise<FakeApi> {
  api = new FakeApi()
  const server = await api.listen()
  useKubeconfig(dir, server, 'elsewhere')
  delete process.env.KUBERNETES_SERVICE_HOST
  return api
}

describe('InferencePool discovery', () => {
  it('ready pods of the pool are instances on every target port; they join and leave as they turn ready, unready, terminating or go', async () => {
    const api = await startApi()
    api.put(pool({ app: 'vllm' }, [p1, p2]))
    api.put(pool({ app: 'other' }, [p1], { name: 'other' }))
    api.put(pod(6))
    api.put(pod(7, { ready: false }))
    api.put(pod(8, { labels: { app: 'other' } }))
    api.put(pod(9, { phase: 'Pending', ready: false, ip: false }))
    api.put(pod(9, { namespace: 'staging' })) // the same labels, another namespace
    const s = await startDiscoveryRouter([SOURCE])
    router = s.router
    expect(members(router)).toEqual(both(6))
    // The pool by name in its namespace, then its pods by its selector, with the kubeconfig's credentials.
    const poolList = api.requests.find((r) => POOLS.test(r.path))!
    expect(poolList.path).toBe('/apis/inference.networking.k8s.io/v1/namespaces/inference/inferencepools')
    expect(poolList.query.get('fieldSelector')).toBe('metadata.name=vllm')
    expect(poolList.auth).toBe('Bearer secret-token')
    const podList = api.requests.find((r) => PODS.test(r.path))!
    expect(podList.path).toBe('/api/v1/namespaces/inference/pods')
    expect(podList.query.get('labelSelector')).toBe('app=vllm')
    await until(() => api.watching('pools') === 1 && api.watching('pods') === 1, 10_000, 'the watches')

    let from = s.lines.length
    api.put(pod(7))
    await untilMembers(router, both(6, 7))
    const added = await untilLog(s.lines, membershipChange, 'the addition logged', from)
    expect(added).toMatchObject({ source: 'inferencePool inference/vllm', removed: [] })
    expect((added.added as string[]).sort()).toEqual(both(7))
    expect(await reached(router, 80)).toEqual(new Set(both(6, 7)))

    api.put(pod(6, { deleting: true })) // terminating, still Ready
    await untilMembers(router, both(7))
    api.put(pod(9, { phase: 'Running', ready: false })) // an IP, not ready yet
    api.put(pod(9))
    await untilMembers(router, both(7, 9))
    api.put(pod(7, { ready: false }))
    await untilMembers(router, both(9))
    api.delete('Pod', 'vllm-6')
    api.put(pod(8, { labels: { app: 'vllm' } })) // relabelled into the pool
    await untilMembers(router, both(8, 9))
    from = s.lines.length
    api.delete('Pod', 'vllm-9')
    await untilMembers(router, both(8))
    const removed = await untilLog(s.lines, membershipChange, 'the removal logged', from)
    expect((removed.removed as string[]).sort()).toEqual(both(9))
    expect(await reached(router, 30)).toEqual(new Set(both(8)))
  })

  it("the pool's selector and target ports follow its changes; a pool deleted leaves no instance, one created brings them back", async () => {
    const api = await startApi()
    api.put(pool({ app: 'vllm', tier: 'gpu' }, [p1]))
    api.put(pod(6, { labels: { app: 'vllm', tier: 'gpu' } }))
    api.put(pod(7, { labels: { app: 'vllm', tier: 'cpu' } }))
    api.put(pool({ app: 'vllm', tier: 'cpu' }, [p2], { namespace: 'staging' })) // the same name elsewhere
    const s = await startDiscoveryRouter([SOURCE])
    router = s.router
    expect(members(router)).toEqual([url(6, p1)])
    expect(api.requests.find((r) => PODS.test(r.path))!.query.get('labelSelector')).toBe('app=vllm,tier=gpu')
    await until(() => api.watching('pods', 'app=vllm,tier=gpu') === 1, 10_000, 'the pods watch')

    // A new selector: the pods are the new selector's, watched with it, the old watch closed.
    api.put(pool({ tier: 'cpu', app: 'vllm' }, [p1]))
    await untilMembers(router, [url(7, p1)])
    await until(() => api.watching('pods') === 1 && api.watching('pods', 'app=vllm,tier=cpu') === 1, 10_000, 'one pods watch, the new selector')
    api.put(pod(8, { labels: { app: 'vllm', tier: 'cpu' } }))
    await untilMembers(router, [url(7, p1), url(8, p1)])

    // Other target ports: the same pods on them.
    api.put(pool({ app: 'vllm', tier: 'cpu' }, [p2]))
    await untilMembers(router, [url(7, p2), url(8, p2)])
    api.put(pool({ app: 'vllm', tier: 'cpu' }, [p1, p2]))
    await untilMembers(router, both(7, 8))
    expect(await reached(router, 80)).toEqual(new Set(both(7, 8)))

    // The pool goes: nothing to route to, and no pods watched.
    const from = s.lines.length
    api.delete('InferencePool', 'vllm')
    await untilMembers(router, [])
    const removed = await untilLog(s.lines, membershipChange, 'the removal logged', from)
    expect((removed.removed as string[]).sort()).toEqual(both(7, 8))
    await until(() => api.watching('pods') === 0, 10_000, 'the pods watch closed')
    api.put(pool({ app: 'vllm', tier: 'gpu' }, [p2]))
    await untilMembers(router, [url(6, p2)])

    // Being deleted counts as gone.
    api.put({ ...pool({ app: 'vllm', tier: 'gpu' }, [p2]), metadata: { name: 'vllm', namespace: 'inference', deletionTimestamp: '2026-12-01T00:00:00Z' } })
    await untilMembers(router, [])
  })

  it('a pool that does not exist, or selects no ready pod, gives no instance; it fills when they come', async () => {
    const api = await startApi()
    const s = await startDiscoveryRouter([SOURCE], { instances: [url(9, p1)] })
    router = s.router
    expect(members(router)).toEqual([url(9, p1)]) // the static instance stays
    await until(() => api.watching('pools') === 1, 10_000, 'the pool watch')
    expect(api.watching('pods')).toBe(0)
    api.put(pool({ app: 'vllm' }, [p1]))
    await until(() => api.watching('pods') === 1, 10_000, 'the pods watch')
    api.put(pod(6, { ready: false }))
    api.put(pod(7, { phase: 'Succeeded', ready: false }))
    expect(members(router)).toEqual([url(9, p1)])
    api.put(pod(6))
    await untilMembers(router, [url(6, p1), url(9, p1)])
  })

  it('the API server dropping the watches: it watches again, or lists again when its version is gone, and goes on', async () => {
    const api = await startApi()
    api.put(pool({ app: 'vllm' }, [p1]))
    api.put(pod(6))
    api.put(pod(7))
    const s = await startDiscoveryRouter([SOURCE])
    router = s.router
    expect(members(router)).toEqual([url(6, p1), url(7, p1)])
    await until(() => api.watching('pools') === 1 && api.watching('pods') === 1, 10_000, 'the watches')

    // Dropped: it watches again from where it was, and the events flow.
    let seen = api.requests.length
    api.endWatches()
    await until(() => api.watching('pools') === 1 && api.watching('pods') === 1, 10_000, 'the watches again')
    const again = api.requests.slice(seen)
    expect(again.every((r) => r.query.get('watch') === 'true')).toBe(true)
    api.put(pod(8))
    await untilMembers(router, [url(6, p1), url(7, p1), url(8, p1)])

    // Dropped while changes happened that it never heard of, and the server no longer has
    // the events since its version (410 Gone): it lists again, and sees them.
    api.delete('Pod', 'vllm-6', { quiet: true })
    api.put(pod(9), { quiet: true })
    api.put(pool({ app: 'vllm' }, [p1, p2]), { quiet: true })
    api.compactedBefore = api.rv
    seen = api.requests.length
    api.endWatches()
    await untilMembers(router, both(7, 8, 9))
    const lists = api.requests.slice(seen).filter((r) => r.query.get('watch') !== 'true')
    expect(lists.map((r) => r.path).sort()).toEqual(['/api/v1/namespaces/inference/pods', '/apis/inference.networking.k8s.io/v1/namespaces/inference/inferencepools'])
    await until(() => api.watching('pools') === 1 && api.watching('pods') === 1, 10_000, 'the watches after the lists')
    api.put(pod(6))
    await untilMembers(router, both(6, 7, 8, 9))
    expect(s.lines.some(sourceFailed)).toBe(false) // neither is a failure
  })

  it('an API error keeps the last list; listing and watching resume when it answers', async () => {
    const api = await startApi()
    api.put(pool({ app: 'vllm' }, [p1]))
    api.put(pod(6))
    api.put(pod(7))
    const s = await startDiscoveryRouter([SOURCE])
    router = s.router
    expect(members(router)).toEqual([url(6, p1), url(7, p1)])
    await until(() => api.watching('pools') === 1 && api.watching('pods') === 1, 10_000, 'the watches')

    const from = s.lines.length
    api.failing = true
    api.endWatches()
    const failed = await untilLog(s.lines, sourceFailed, 'the API error reported', from)
    expect(failed).toMatchObject({ level: 40, source: 'inferencePool inference/vllm' })
    expect(failed.err).toMatch(/(InferencePool 'inference\/vllm'|Pods of InferencePool 'inference\/vllm' \(app=vllm\)): 500/)
    expect(members(router)).toEqual([url(6, p1), url(7, p1)])
    expect(await reached(router, 30)).toEqual(new Set([url(6, p1), url(7, p1)]))

    api.failing = false
    await until(() => api.watching('pools') === 1 && api.watching('pods') === 1, 60_000, 'new watches')
    api.put(pod(7, { ready: false }))
    await untilMembers(router, [url(6, p1)])
    expect(s.lines.some((l) => l.msg === 'discovery source answers again')).toBe(true)
  })

  it("a reload to another pool stops the first (its watches close, its pods leave); without the source no watch stays open", async () => {
    const api = await startApi()
    api.put(pool({ app: 'vllm' }, [p1]))
    api.put(pool({ app: 'big' }, [p2], { name: 'big' }))
    api.put(pod(6))
    api.put(pod(7, { labels: { app: 'big' } }))
    const s = await startDiscoveryRouter([SOURCE])
    router = s.router
    expect(members(router)).toEqual([url(6, p1)])
    await until(() => api.watching('pools') === 1 && api.watching('pods') === 1, 10_000, 'the watches')
    const reload = (endpoint: Record<string, unknown>) => router!.reload({ ...router!.config, endpoints: [{ name: 'default', instances: [], routing: {}, ...endpoint }] as never })

    reload({ discovery: [{ type: 'inferencePool', name: 'big', namespace: 'inference', scheme: 'http' }] })
    await untilMembers(router, [url(7, p2)])
    await until(() => api.watching('pools') === 1 && api.watching('pods') === 1 && api.watching('pods', 'app=big') === 1, 10_000, "the new pool's watches only")
    expect([...api.watches].find((w) => w.kind === 'pools')!.field).toBe('metadata.name=big')
    api.put(pod(8)) // the old pool's: no longer heard of
    api.put(pod(9, { labels: { app: 'big' } }))
    await untilMembers(router, [url(7, p2), url(9, p2)])
    expect(s.lines.filter(membershipChange).some((l) => (l.added as string[]).some((id) => id.startsWith('http://127.0.0.8:')))).toBe(false)

    reload({ instances: [{ url: url(8, p1), weight: 1, models: [] }] })
    await untilMembers(router, [url(8, p1)])
    await until(() => api.watches.size === 0, 10_000, 'no watch open')
  })

  it('a cluster without the InferencePool CRD: the 404 is reported, and the pool is found once it is there', async () => {
    const api = await startApi()
    api.noCrd = true
    api.put(pool({ app: 'vllm' }, [p1]))
    api.put(pod(6))
    const s = await startDiscoveryRouter([SOURCE], { instances: [url(9, p1)] })
    router = s.router
    const failed = await untilLog(s.lines, sourceFailed, 'the 404 reported')
    expect(failed).toMatchObject({ source: 'inferencePool inference/vllm' })
    // The server's own message, not the whole answer: the same failure again is not a new one.
    expect(failed.err).toBe("InferencePool 'inference/vllm': 404 the server could not find the requested resource")
    // A third request: the second's answer has been handled (retries 1 s, then 2 s, apart).
    await until(() => api.requests.filter((r) => POOLS.test(r.path)).length >= 3, 20_000, 'two retries')
    expect(s.lines.filter(sourceFailed)).toHaveLength(1)
    expect(members(router)).toEqual([url(9, p1)])
    api.noCrd = false
    await untilMembers(router, [url(6, p1), url(9, p1)])
  })

  it("each pod's role from its llm-d.ai/role label (or the roleLabel configured), pods without it the source's role; a relabelled pod changes role", async () => {
    const api = await startApi()
    api.put(pool({ app: 'vllm' }, [p1]))
    api.put(pod(6, { labels: { app: 'vllm', 'llm-d.ai/role': 'prefill' } }))
    api.put(pod(7, { labels: { app: 'vllm', 'llm-d.ai/role': 'decode' } }))
    api.put(pod(8))
    api.put(pod(9, { labels: { app: 'vllm', 'llm-d.ai/role': 'encode' } })) // serves no text request
    const s = await startDiscoveryRouter([{ ...SOURCE, role: 'decode' }])
    router = s.router
    expect(roles(router)).toEqual([`${url(6, p1)} prefill`, `${url(7, p1)} decode`, `${url(8, p1)} decode`])
    expect(s.endpoint.roleCounts()).toEqual({ prefill: 1, decode: 2, both: 0 })
    await until(() => api.watching('pods') === 1, 10_000, 'the pods watch')
    api.put(pod(8, { labels: { app: 'vllm', 'llm-d.ai/role': 'prefill-decode' } }))
    api.put(pod(6, { labels: { app: 'vllm' } }))
    await untilRoles(router, [`${url(6, p1)} decode`, `${url(7, p1)} decode`, `${url(8, p1)} both`])
    // A value of no known role is warned of, naming the pod; the pod takes the source's role.
    const from = s.lines.length
    api.put(pod(7, { labels: { app: 'vllm', 'llm-d.ai/role': 'decoder' } }))
    const warned = await untilLog(s.lines, (l) => l.msg === "discovery source found role labels it does not know; those instances take the source's role", 'the unknown value warned of', from)
    expect(warned.err).toMatch(/\(vllm-7: 'decoder'\) take the source's role, decode/)
    await closeRouter(router, 10_000)

    // Another label: llm-d's is then not read (the encode pod is an instance like any other).
    api.put(pod(7, { labels: { app: 'vllm', 'example.com/stage': 'prefill', 'llm-d.ai/role': 'decode' } }))
    const t = await startDiscoveryRouter([{ ...SOURCE, roleLabel: 'example.com/stage' }])
    router = t.router
    expect(roles(router)).toEqual([`${url(6, p1)} both`, `${url(7, p1)} prefill`, `${url(8, p1)} both`, `${url(9, p1)} both`])
  })

  it('without a namespace outside a cluster, it says it needs one and routes to the static instances', async () => {
    await startApi()
    const s = await startDiscoveryRouter([{ type: 'inferencePool', name: 'vllm' }], { instances: [url(9, p1)] })
    router = s.router
    const failed = await untilLog(s.lines, sourceFailed, 'the missing namespace reported')
    expect(failed).toMatchObject({ source: 'inferencePool vllm' })
    expect(failed.err).toMatch(/inferencePool 'vllm' needs a namespace: not in a cluster/)
    expect(members(router)).toEqual([url(9, p1)])
    expect(api.requests).toEqual([])
  })
})

// serve as an operator runs it: a child process (dist/cli.js, built by `npm test`) with a
// config file whose endpoint has only the pool, the kubeconfig in KUBECONFIG.
describe('serve with an inferencePool source', () => {
  const cli = fileURLToPath(new URL('../../../dist/cli.js', import.meta.url))
  let child: ChildProcessWithoutNullStreams | undefined
  afterEach(async () => {
    if (child && child.exitCode === null) {
      child.kill('SIGTERM')
      await new Promise((r) => child!.once('exit', r))
    }
    child = undefined
  })

  it('routes to the pool\'s ready pods, and to a pod that becomes ready', async () => {
    const api = await startApi()
    api.put(pool({ app: 'vllm' }, [p1, p2]))
    api.put(pod(6))
    api.put(pod(7))
    api.put(pod(8, { ready: false }))
    const config = join(dir, 'serve.yaml')
    writeFileSync(
      config,
      [
        'engineLoad: { mode: off }',
        'warmup: { requests: 0, connections: 0 }',
        'endpoints:',
        '  - name: default',
        '    discovery:',
        '      - { type: inferencePool, name: vllm, namespace: inference }',
        '',
      ].join('\n'),
    )
    child = spawn(process.execPath, [cli, 'serve', '--config', config, '--host', '127.0.0.1', '--port', '0', '--admin-port', '0', '--debug-headers', '--drain-delay-ms', '0'], {
      env: process.env, // KUBECONFIG: the fake API server
    })
    let err = ''
    child.stdout.resume()
    const started = await new Promise<{ url: string; admin: string }>((resolve, reject) => {
      child!.stderr.on('data', (d: Buffer) => {
        err += d.toString()
        const m = /on (http:\/\/[\d.:]+) \(admin (http:\/\/[\d.:]+)\)/.exec(err)
        if (m) resolve({ url: m[1]!, admin: m[2]! })
      })
      child!.once('exit', (code) => reject(new Error(`serve exited with ${code}:\n${err}`)))
    })
    const healthy = async () => {
      const r = (await (await fetch(`${started.admin}/admin/instances`)).json()) as { endpoints: { instances: { id: string; healthy: boolean }[] }[] }
      return r.endpoints[0]!.instances.filter((i) => i.healthy).map((i) => i.id).sort()
    }
    // serve waits for the source's first answer and its probes before it says it routes.
    expect(await healthy()).toEqual(both(6, 7))
    const seen = new Set<string>()
    for (let i = 0; i < 80; i++) {
      const r = await post(`${started.url}/v1/chat/completions`, chat(`conversation ${i} ${Math.random()}`, { model: MODEL, max_tokens: 1 }))
      expect(r.status).toBe(200)
      seen.add(r.headers.get('x-prefix-router-instance')!)
    }
    expect(seen).toEqual(new Set(both(6, 7)))

    api.put(pod(8))
    api.delete('Pod', 'vllm-6')
    let now: string[] = []
    await until(async () => (now = await healthy()).join(' ') === both(7, 8).join(' '), 20_000, `instances 7 and 8 (now ${now.join(', ')})`)
    const r = await post(`${started.url}/v1/chat/completions`, chat('after the change', { model: MODEL, max_tokens: 1 }))
    expect(r.status).toBe(200)
    expect(both(7, 8)).toContain(r.headers.get('x-prefix-router-instance'))
    child.kill('SIGTERM')
    expect(await new Promise((r) => child!.once('exit', r))).toBe(0)
  })
})
