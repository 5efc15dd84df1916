// Discovery through the Kubernetes API, against a server written here that speaks the
// EndpointSlice list and watch protocol (a list with a resourceVersion, then a watch that
// streams ADDED / MODIFIED / DELETED events, one JSON object a line), found through a
// kubeconfig file as kubectl would find it. The instances are simulator workers on 127.0.0.x.
import http from 'node:http'
import type { AddressInfo } from 'node:net'
import { mkdtempSync, rmSync } from 'node:fs'
import { tmpdir } from 'node:os'
import { join } from 'node:path'
import { afterAll, afterEach, beforeAll, describe, expect, it } from 'vitest'
import type { ProxyServer } from '../../../src/proxy/proxy.js'
import { startSimFleet, type SimFleet } from '../../../src/sim/index.js'
import { closeRouter, until } from '../../proxy/helpers.js'
import { members, membershipChange, reached, roles, sourceFailed, startDiscoveryRouter, untilLog, untilMembers, untilRoles, useKubeconfig } from './helpers.js'

interface Slice {
  apiVersion: 'discovery.k8s.io/v1'
  kind: 'EndpointSlice'
  metadata: { name: string; namespace: string; labels: Record<string, string>; resourceVersion?: string }
  addressType: 'IPv4'
  ports: { name?: string; port: number; protocol: 'TCP' }[]
  endpoints: { addresses: string[]; conditions?: { ready?: boolean }; targetRef?: { kind: 'Pod'; name: string; namespace: string } }[]
}
/** A pod as the role labels are read from it: its labels are all that matters here. */
interface Pod {
  apiVersion: 'v1'
  kind: 'Pod'
  metadata: { name: string; namespace: string; labels: Record<string, string>; resourceVersion?: string }
}
type Obj = Slice | Pod
type Watcher = http.ServerResponse & { kind: 'slices' | 'pods'; ns: string; selector: string | null }

const SLICES = /^\/apis\/discovery\.k8s\.io\/v1\/namespaces\/([^/]+)\/endpointslices$/
const PODS = /^\/api\/v1\/namespaces\/([^/]+)\/pods$/

/** A fake API server: EndpointSlices and Pods by namespace, list and watch, and what it was asked. */
class FakeApi {
  readonly slices = new Map<string, Slice>()
  readonly pods = new Map<string, Pod>()
  readonly requests: { path: string; query: URLSearchParams; auth: string | undefined }[] = []
  readonly watches = new Set<Watcher>()
  /** While set, every request is answered 500, as an API server in trouble would. */
  failing = false
  /** While set, Pods are answered 403, as for a service account granted the slices only. */
  podsForbidden = false
  #rv = 100
  server = http.createServer((req, res) => this.#handle(req, res))

  async listen(): Promise<string> {
    await new Promise<void>((r) => this.server.listen(0, '127.0.0.1', r))
    return `http://127.0.0.1:${(this.server.address() as AddressInfo).port}`
  }

  #matches(o: Obj, kind: 'slices' | 'pods', ns: string, selector: string | null): boolean {
    if ((o.kind === 'Pod') !== (kind === 'pods') || o.metadata.namespace !== ns) return false
    // Equality terms (a=b,c=d) and existence (a): what the router sends.
    return (selector ?? '').split(',').filter(Boolean).every((term) => {
      const [k, v] = term.split('=')
      return v === undefined ? o.metadata.labels[k!] !== undefined : o.metadata.labels[k!] === v
    })
  }

  #status(res: http.ServerResponse, code: number, message: string): void {
    res.writeHead(code, { 'content-type': 'application/json' })
    res.end(JSON.stringify({ kind: 'Status', apiVersion: 'v1', status: 'Failure', message, code }))
  }

  #handle(req: http.IncomingMessage, res: http.ServerResponse): void {
    const u = new URL(req.url!, 'http://x')
    this.requests.push({ path: u.pathname, query: u.searchParams, auth: req.headers.authorization })
    const slices = SLICES.exec(u.pathname)
    const pods = PODS.exec(u.pathname)
    if (this.failing) return this.#status(res, 500, 'etcd is unhappy')
    if (!slices && !pods) return this.#status(res, 404, 'not found')
    if (pods && this.podsForbidden) {
      return this.#status(res, 403, `pods is forbidden: User "system:serviceaccount:inference:prefix-router" cannot list resource "pods" in API group "" in the namespace "${pods[1]}"`)
    }
    const kind = slices ? 'slices' : 'pods'
    const ns = (slices ?? pods)![1]!
    const selector = u.searchParams.get('labelSelector')
    const watch = u.searchParams.get('watch')
    if (watch === 'true' || watch === '1') {
      res.writeHead(200, { 'content-type': 'application/json' })
      res.flushHeaders()
      const w = Object.assign(res, { kind, ns, selector }) as Watcher
      this.watches.add(w)
      res.on('close', () => this.watches.delete(w))
      return
    }
    const items = [...(kind === 'slices' ? this.slices : this.pods).values()].filter((o) => this.#matches(o, kind, ns, selector))
    res.writeHead(200, { 'content-type': 'application/json' })
    res.end(JSON.stringify({ kind: kind === 'slices' ? 'EndpointSliceList' : 'PodList', apiVersion: kind === 'slices' ? 'discovery.k8s.io/v1' : 'v1', metadata: { resourceVersion: String(this.#rv) }, items }))
  }

  /** Each watch sees what a real one would: an object whose labels no longer match is DELETED for it. */
  #event(old: Obj | undefined, o: Obj | undefined, gone?: Obj): void {
    for (const w of this.watches) {
      const was = old !== undefined && this.#matches(old, w.kind, w.ns, w.selector)
      const is = o !== undefined && this.#matches(o, w.kind, w.ns, w.selector)
      if (is) w.write(`${JSON.stringify({ type: was ? 'MODIFIED' : 'ADDED', object: o })}\n`)
      else if (was) w.write(`${JSON.stringify({ type: 'DELETED', object: gone ?? o ?? old })}\n`)
    }
  }

  put(o: Obj): void {
    const map = (o.kind === 'Pod' ? this.pods : this.slices) as Map<string, Obj>
    const old = map.get(o.metadata.name)
    o.metadata.resourceVersion = String(++this.#rv)
    map.set(o.metadata.name, o)
    this.#event(old, o, o)
  }

  delete(name: string): void {
    const s = this.slices.get(name)!
    this.slices.delete(name)
    s.metadata.resourceVersion = String(++this.#rv)
    this.#event(s, undefined)
  }

  watching(kind: 'slices' | 'pods'): number {
    return [...this.watches].filter((w) => w.kind === kind).length
  }

  /** Ends the open watches (an API server restarting, say). */
  endWatches(): void {
    for (const w of this.watches) w.end()
  }

  async close(): Promise<void> {
    this.server.closeAllConnections()
    await new Promise<void>((r) => this.server.close(() => r()))
  }
}

const dir = mkdtempSync(join(tmpdir(), 'pr-discovery-k8s-'))
const workers: SimFleet[] = []
let port: number
let api: FakeApi
let router: ProxyServer | undefined
const url = (n: number) => `http://127.0.0.${n}:${port}`

function slice(name: string, endpoints: Slice['endpoints'], opts: { namespace?: string; labels?: Record<string, string>; ports?: Slice['ports'] } = {}): Slice {
  return {
    apiVersion: 'discovery.k8s.io/v1',
    kind: 'EndpointSlice',
    metadata: { name, namespace: opts.namespace ?? 'inference', labels: opts.labels ?? { 'kubernetes.io/service-name': 'vllm' } },
    addressType: 'IPv4',
    ports: opts.ports ?? [{ name: 'http', port, protocol: 'TCP' }],
    endpoints,
  }
}
const ready = (n: number, r?: boolean) => ({ addresses: [`127.0.0.${n}`], ...(r !== undefined && { conditions: { ready: r } }) })
/** A ready endpoint on 127.0.0.n whose pod is vllm-n. */
const ofPod = (n: number) => ({ addresses: [`127.0.0.${n}`], targetRef: { kind: 'Pod' as const, name: `vllm-${n}`, namespace: 'inference' } })
const pod = (n: number, labels: Record<string, string> = {}): Pod => ({ apiVersion: 'v1', kind: 'Pod', metadata: { name: `vllm-${n}`, namespace: 'inference', labels: { app: 'vllm', ...labels } } })

beforeAll(async () => {
  // Workers on 127.0.0.6, .7 and .8, on one port (a slice's port is every endpoint's).
  const first = await startSimFleet({ instances: 1, profile: 'tiny', host: '127.0.0.6' })
  workers.push(first)
  port = first.workers[0]!.port
  for (const n of [7, 8]) workers.push(await startSimFleet({ instances: 1, profile: 'tiny', host: `127.0.0.${n}`, port }))
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

/** A fresh API server, and a kubeconfig pointing at it (namespace `inference`, a bearer token). */
async function startApi(): Promise<FakeApi> {
  api = new FakeApi()
  const server = await api.listen()
  useKubeconfig(dir, server, 'inference')
  delete process.env.KUBERNETES_SERVICE_HOST
  return api
}

describe('Kubernetes discovery', () => {
  it("a Service's ready endpoints are its instances; watch events move them in and out", async () => {
    const api = await startApi()
    api.put(slice('vllm-abc', [ready(6, true), ready(7, false)]))
    api.put(slice('other-xyz', [ready(8)], { labels: { 'kubernetes.io/service-name': 'other' } }))
    const s = await startDiscoveryRouter([{ type: 'kubernetes', service: 'vllm' }])
    router = s.router
    expect(members(router)).toEqual([url(6)])
    // Listed in the kubeconfig's namespace, by the Service's label, with the kubeconfig's credentials.
    const list = api.requests.find((r) => SLICES.test(r.path))!
    expect(list.path).toBe('/apis/discovery.k8s.io/v1/namespaces/inference/endpointslices')
    expect(list.query.get('labelSelector')).toBe('kubernetes.io/service-name=vllm')
    expect(list.auth).toBe('Bearer secret-token')
    await until(() => api.watching('slices') === 1, 10_000, 'the watch')

    let from = s.lines.length
    api.put(slice('vllm-abc', [ready(6, true), ready(7, true)]))
    await untilMembers(router, [url(6), url(7)])
    expect(await untilLog(s.lines, membershipChange, 'the addition logged', from)).toMatchObject({ source: 'kubernetes vllm', added: [url(7)], removed: [] })

    api.put(slice('vllm-def', [ready(8)])) // no conditions: ready
    await untilMembers(router, [url(6), url(7), url(8)])
    expect(await reached(router, 60)).toEqual(new Set([url(6), url(7), url(8)]))

    from = s.lines.length
    api.delete('vllm-abc')
    await untilMembers(router, [url(8)])
    const removed = await untilLog(s.lines, membershipChange, 'the removal logged', from)
    expect((removed.removed as string[]).sort()).toEqual([url(6), url(7)])
    expect(await reached(router, 10)).toEqual(new Set([url(8)]))
  })

  it('an API error keeps the last list; listing and watching resume when it answers', async () => {
    const api = await startApi()
    api.put(slice('vllm-abc', [ready(6), ready(7)]))
    const s = await startDiscoveryRouter([{ type: 'kubernetes', service: 'vllm' }])
    router = s.router
    expect(members(router)).toEqual([url(6), url(7)])
    await until(() => api.watching('slices') === 1, 10_000, 'the watch')

    const from = s.lines.length
    api.failing = true
    api.endWatches()
    const failed = await untilLog(s.lines, sourceFailed, 'the API error reported', from)
    expect(failed).toMatchObject({ level: 40, source: 'kubernetes vllm' })
    expect(failed.err).toMatch(/EndpointSlices in 'inference' \(kubernetes\.io\/service-name=vllm\): 500/)
    expect(members(router)).toEqual([url(6), url(7)])
    expect(await reached(router, 30)).toEqual(new Set([url(6), url(7)]))

    api.failing = false
    // It watches again from the last resourceVersion it saw (as a real server would replay
    // what happened since); the old watch ended before the failures were reported.
    await until(() => api.watching('slices') === 1, 60_000, 'a new watch')
    expect(api.requests.filter((r) => SLICES.test(r.path)).at(-1)!.query.get('resourceVersion')).toBe('101')
    api.put(slice('vllm-abc', [ready(7)]))
    await untilMembers(router, [url(7)])
    expect(s.lines.some((l) => l.msg === 'discovery source answers again')).toBe(true)
  })

  it('a label selector, a namespace and a port by name from the configuration', async () => {
    const api = await startApi()
    const ports: Slice['ports'] = [
      { name: 'metrics', port: 1, protocol: 'TCP' },
      { name: 'http', port, protocol: 'TCP' },
    ]
    api.put(slice('a', [ready(6)], { namespace: 'serving', labels: { app: 'vllm', tier: 'gpu' }, ports }))
    api.put(slice('b', [ready(7)], { namespace: 'serving', labels: { app: 'vllm', tier: 'cpu' }, ports }))
    api.put(slice('c', [ready(8)], { labels: { app: 'vllm', tier: 'gpu' }, ports })) // namespace inference
    const s = await startDiscoveryRouter([{ type: 'kubernetes', labelSelector: 'app=vllm,tier=gpu', namespace: 'serving', port: 'http' }])
    router = s.router
    expect(members(router)).toEqual([url(6)])
    const first = api.requests.find((r) => SLICES.test(r.path))!
    expect(first.path).toBe('/apis/discovery.k8s.io/v1/namespaces/serving/endpointslices')
    expect(first.query.get('labelSelector')).toBe('app=vllm,tier=gpu')
    // The pods' role labels are read in the same namespace.
    expect(api.requests.find((r) => PODS.test(r.path))!.path).toBe('/api/v1/namespaces/serving/pods')
  })

  it("each endpoint's role is its pod's llm-d.ai/role label, read from the labelled pods and following their changes; the others take the source's role", async () => {
    const api = await startApi()
    api.put(pod(6, { 'llm-d.ai/role': 'prefill' }))
    api.put(pod(7, { 'llm-d.ai/role': 'decode' }))
    api.put(pod(8)) // no role label
    api.put(slice('vllm-abc', [ofPod(6), ofPod(7), ofPod(8)]))
    const s = await startDiscoveryRouter([{ type: 'kubernetes', service: 'vllm' }])
    router = s.router
    // The first list already has the pods' roles: no moment with every instance doing both.
    expect(roles(router)).toEqual([`${url(6)} prefill`, `${url(7)} decode`, `${url(8)} both`])
    const pods = api.requests.find((r) => PODS.test(r.path))!
    expect(pods.path).toBe('/api/v1/namespaces/inference/pods')
    // Only the pods that have the label, with the same credentials.
    expect(pods.query.get('labelSelector')).toBe('llm-d.ai/role')
    expect(pods.auth).toBe('Bearer secret-token')
    await until(() => api.watching('pods') === 1 && api.watching('slices') === 1, 10_000, 'the watches')
    expect(s.lines.filter((l) => l.level === 40)).toEqual([])

    // Relabelled, labelled, unlabelled: each pod's change reaches its endpoint.
    api.put(pod(7, { 'llm-d.ai/role': 'prefill-decode' }))
    api.put(pod(8, { 'llm-d.ai/role': 'decode' }))
    api.put(pod(6))
    await untilRoles(router, [`${url(6)} both`, `${url(7)} both`, `${url(8)} decode`])
    api.put(pod(6, { 'llm-d.ai/role': 'encode-prefill' }))
    await untilRoles(router, [`${url(6)} prefill`, `${url(7)} both`, `${url(8)} decode`])
    // Whole requests (these short chats skip the prefill leg) run where they are decoded: the
    // prefill-only pod takes none of them.
    expect(await reached(router, 40)).toEqual(new Set([url(7), url(8)]))

    // A value of no known role: the source's role, and a warning naming the pod and the value.
    const from = s.lines.length
    api.put(pod(7, { 'llm-d.ai/role': 'prefiller' }))
    const warned = await untilLog(s.lines, (l) => l.msg === "discovery source found role labels it does not know; those instances take the source's role", 'the unknown value warned of', from)
    expect(warned).toMatchObject({ level: 40, source: 'kubernetes vllm' })
    expect(warned.err).toMatch(/pods with a llm-d\.ai\/role label of no known role \(vllm-7: 'prefiller'\) take the source's role, both; the values read are prefill, decode, prefill-decode, both, encode/)
    expect(roles(router)).toEqual([`${url(6)} prefill`, `${url(7)} both`, `${url(8)} decode`])
    // An encode-only pod serves no text request: it is no instance.
    api.put(pod(7, { 'llm-d.ai/role': 'encode' }))
    await untilRoles(router, [`${url(6)} prefill`, `${url(8)} decode`])
    await untilLog(s.lines, (l) => l.msg === 'discovery source answers again', 'the warning cleared', from)
  })

  it("without access to the pods, every endpoint takes the source's role and the warning says what to grant; roleLabel: false reads no pods", async () => {
    const api = await startApi()
    api.podsForbidden = true
    api.put(pod(6, { 'llm-d.ai/role': 'prefill' }))
    api.put(slice('vllm-abc', [ofPod(6), ofPod(7)]))
    const s = await startDiscoveryRouter([{ type: 'kubernetes', service: 'vllm', role: 'decode' }])
    router = s.router
    expect(roles(router)).toEqual([`${url(6)} decode`, `${url(7)} decode`])
    const warned = await untilLog(s.lines, (l) => l.msg === "discovery source cannot read the pods' role labels; its instances take the source's role", 'the forbidden pods warned of')
    expect(warned).toMatchObject({ level: 40, source: 'kubernetes vllm (decode)', instances: 2 })
    expect(warned.err).toMatch(/Pods' llm-d\.ai\/role labels in 'inference': 403 pods is forbidden: .*; every instance takes the source's role, decode: grant get\/list\/watch on pods, or set roleLabel: false/)
    // Granted: the next try (after a second) reads the label.
    const from = s.lines.length
    api.podsForbidden = false
    await untilRoles(router, [`${url(6)} prefill`, `${url(7)} decode`])
    await untilLog(s.lines, (l) => l.msg === 'discovery source answers again', 'the source whole again', from)
    await closeRouter(router, 10_000)
    await api.close()

    // roleLabel: false: no pod is asked for, every endpoint is the source's role.
    const fresh = await startApi()
    fresh.put(pod(6, { 'llm-d.ai/role': 'prefill' }))
    fresh.put(slice('vllm-abc', [ofPod(6), ofPod(7)]))
    const t = await startDiscoveryRouter([{ type: 'kubernetes', service: 'vllm', role: 'decode', roleLabel: false }])
    router = t.router
    expect(roles(router)).toEqual([`${url(6)} decode`, `${url(7)} decode`])
    await until(() => fresh.watching('slices') === 1, 10_000, 'the slices watch')
    expect(fresh.requests.filter((r) => PODS.test(r.path))).toEqual([])
  })
})
