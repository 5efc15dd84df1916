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
import type { ProxyServer } from '../../src/proxy/proxy.js'
import { startSimFleet, type SimFleet } from '../../src/sim/index.js'
import { closeRouter, until } from '../proxy/helpers.js'
import { members, membershipChange, reached, sourceFailed, startDiscoveryRouter, untilLog, untilMembers, useKubeconfig } from './helpers.js'

interface Slice {
  apiVersion: 'discovery.k8s.io/v1'
  kind: 'EndpointSlice'
  metadata: { name: string; namespace: string; labels: Record<string, string>; resourceVersion?: string }
  addressType: 'IPv4'
  ports: { name?: string; port: number; protocol: 'TCP' }[]
  endpoints: { addresses: string[]; conditions?: { ready?: boolean } }[]
}

/** A fake API server: EndpointSlices by namespace, list and watch, and what it was asked. */
class FakeApi {
  readonly slices = new Map<string, Slice>()
  readonly requests: { path: string; query: URLSearchParams; auth: string | undefined }[] = []
  readonly watches = new Set<http.ServerResponse>()
  /** While set, every request is answered 500, as an API server in trouble would. */
  failing = false
  #rv = 100
  server = http.createServer((req, res) => this.#handle(req, res))

  async listen(): Promise<string> {
    await new Promise<void>((r) => this.server.listen(0, '127.0.0.1', r))
    return `http://127.0.0.1:${(this.server.address() as AddressInfo).port}`
  }

  #matches(s: Slice, ns: string, selector: string | null): boolean {
    if (s.metadata.namespace !== ns) return false
    // Equality terms only (a=b,c=d): what the router sends.
    return (selector ?? '').split(',').filter(Boolean).every((term) => {
      const [k, v] = term.split('=')
      return s.metadata.labels[k!] === v
    })
  }

  #handle(req: http.IncomingMessage, res: http.ServerResponse): void {
    const u = new URL(req.url!, 'http://x')
    this.requests.push({ path: u.pathname, query: u.searchParams, auth: req.headers.authorization })
    const m = /^\/apis\/discovery\.k8s\.io\/v1\/namespaces\/([^/]+)\/endpointslices$/.exec(u.pathname)
    if (this.failing || !m) {
      res.writeHead(this.failing ? 500 : 404, { 'content-type': 'application/json' })
      res.end(JSON.stringify({ kind: 'Status', apiVersion: 'v1', status: 'Failure', message: this.failing ? 'etcd is unhappy' : 'not found', code: this.failing ? 500 : 404 }))
      return
    }
    const ns = m[1]!
    const selector = u.searchParams.get('labelSelector')
    const watch = u.searchParams.get('watch')
    if (watch === 'true' || watch === '1') {
      res.writeHead(200, { 'content-type': 'application/json' })
      res.flushHeaders()
      const w = Object.assign(res, { ns, selector })
      this.watches.add(w)
      res.on('close', () => this.watches.delete(w))
      return
    }
    const items = [...this.slices.values()].filter((s) => this.#matches(s, ns, selector))
    res.writeHead(200, { 'content-type': 'application/json' })
    res.end(JSON.stringify({ kind: 'EndpointSliceList', apiVersion: 'discovery.k8s.io/v1', metadata: { resourceVersion: String(this.#rv) }, items }))
  }

  #event(type: 'ADDED' | 'MODIFIED' | 'DELETED', s: Slice): void {
    for (const w of this.watches as Set<http.ServerResponse & { ns: string; selector: string | null }>) {
      if (this.#matches(s, w.ns, w.selector)) w.write(`${JSON.stringify({ type, object: s })}\n`)
    }
  }

  put(s: Slice): void {
    const type = this.slices.has(s.metadata.name) ? 'MODIFIED' : 'ADDED'
    s.metadata.resourceVersion = String(++this.#rv)
    this.slices.set(s.metadata.name, s)
    this.#event(type, s)
  }

  delete(name: string): void {
    const s = this.slices.get(name)!
    this.slices.delete(name)
    s.metadata.resourceVersion = String(++this.#rv)
    this.#event('DELETED', s)
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
    const list = api.requests[0]!
    expect(list.path).toBe('/apis/discovery.k8s.io/v1/namespaces/inference/endpointslices')
    expect(list.query.get('labelSelector')).toBe('kubernetes.io/service-name=vllm')
    expect(list.auth).toBe('Bearer secret-token')
    await until(() => api.watches.size === 1, 10_000, 'the watch')

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
    await until(() => api.watches.size === 1, 10_000, 'the watch')

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
    await until(() => api.watches.size === 1, 60_000, 'a new watch')
    expect(api.requests.at(-1)!.query.get('resourceVersion')).toBe('101')
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
    expect(api.requests[0]!.path).toBe('/apis/discovery.k8s.io/v1/namespaces/serving/endpointslices')
    expect(api.requests[0]!.query.get('labelSelector')).toBe('app=vllm,tier=gpu')
  })
})
