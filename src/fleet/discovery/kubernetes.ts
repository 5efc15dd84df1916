// Instances from Kubernetes: the EndpointSlices of a Service (or of a label selector),
// listed and then watched through the API server, each ready address an instance. The
// client library is loaded only when such a source is configured: it is large.
import { existsSync } from 'node:fs'
import { homedir } from 'node:os'
import { join } from 'node:path'
import type { KubeConfig, V1EndpointSlice } from '@kubernetes/client-node'
import { requireFeature } from '../../core/optional-packages.js'
import type { KubernetesSourceConfig } from './schema.js'
import { DiscoveryError, entry, hostPort, type DiscoverySource, type InstanceEntry } from './source.js'

export const SERVICE_ACCOUNT = '/var/run/secrets/kubernetes.io/serviceaccount'
/** After a failed list or watch, the next try waits this long, doubling up to the cap. */
export const RETRY_MS = { first: 1000, max: 30_000 }

type Informer = { start(): Promise<void>; stop(): Promise<void>; list(): readonly V1EndpointSlice[] }

/** The selector that finds the slices: the Service's own label, and the one given. */
export function selectorOf(cfg: KubernetesSourceConfig): string {
  return [cfg.service !== undefined ? `kubernetes.io/service-name=${cfg.service}` : undefined, cfg.labelSelector].filter(Boolean).join(',')
}

/** Instance URLs of the ready endpoints in the slices, on the port chosen by `cfg.port`. */
export function instancesOf(slices: readonly V1EndpointSlice[], cfg: KubernetesSourceConfig): InstanceEntry[] {
  const urls = new Set<string>()
  for (const s of slices) {
    const port =
      typeof cfg.port === 'number' ? cfg.port : cfg.port === undefined ? s.ports?.find((p) => p.port !== undefined)?.port : s.ports?.find((p) => p.name === cfg.port)?.port
    if (port === undefined) continue
    for (const ep of s.endpoints ?? []) {
      // An unset condition means ready (the API's own reading of it).
      if (ep.conditions?.ready === false) continue
      for (const a of ep.addresses) urls.add(`${cfg.scheme}://${hostPort(a, port)}`)
    }
  }
  return [...urls].sort().map(entry)
}

/** In-cluster credentials when running in a pod, else the kubeconfig (KUBECONFIG or ~/.kube/config). */
export function loadKubeConfig(kc: KubeConfig): void {
  if (process.env.KUBERNETES_SERVICE_HOST && existsSync(join(SERVICE_ACCOUNT, 'token'))) return kc.loadFromCluster()
  const file = process.env.KUBECONFIG?.split(':').find(Boolean) ?? join(homedir(), '.kube', 'config')
  if (!existsSync(file)) throw new DiscoveryError(`no in-cluster credentials and no kubeconfig: '${file}' does not exist`)
  kc.loadFromDefault()
}

export class KubernetesSource implements DiscoverySource {
  readonly #cfg: KubernetesSourceConfig
  #informer: Informer | undefined
  #retry: NodeJS.Timeout | undefined
  #stopped = false

  constructor(cfg: KubernetesSourceConfig) {
    this.#cfg = cfg
  }

  start(onChange: (list: InstanceEntry[]) => void, onError: (err: Error) => void): void {
    void this.#start(onChange, onError).catch((err: Error) => onError(new DiscoveryError(`kubernetes discovery cannot start: ${err.message}`)))
  }

  async #start(onChange: (list: InstanceEntry[]) => void, onError: (err: Error) => void): Promise<void> {
    requireFeature('kubernetes')
    const k8s = await import('@kubernetes/client-node')
    const kc = new k8s.KubeConfig()
    loadKubeConfig(kc)
    const namespace = this.#cfg.namespace ?? kc.getContextObject(kc.getCurrentContext())?.namespace ?? 'default'
    const labelSelector = selectorOf(this.#cfg)
    const api = kc.makeApiClient(k8s.DiscoveryV1Api)
    // One report per burst: a list applies its slices one event at a time, and a list in
    // between would be half old, half new.
    let pending = false
    let delay = RETRY_MS.first
    const report = () => {
      if (pending) return
      pending = true
      setImmediate(() => {
        pending = false
        delay = RETRY_MS.first // it answers: the next failure starts the back-off afresh
        if (!this.#stopped) onChange(instancesOf(informer.list(), this.#cfg))
      })
    }
    const list = async () => {
      const l = await api.listNamespacedEndpointSlice({ namespace, labelSelector })
      report() // also when the list is empty or unchanged, which fires no event
      return l
    }
    const informer = k8s.makeInformer(kc, `/apis/discovery.k8s.io/v1/namespaces/${namespace}/endpointslices`, list, labelSelector)
    this.#informer = informer
    informer.on('add', report)
    informer.on('update', report)
    informer.on('delete', report)
    informer.on('error', (err: unknown) => {
      if (this.#stopped) return
      onError(new DiscoveryError(`EndpointSlices in '${namespace}' (${labelSelector}): ${describeError(err)}`))
      // The informer stops on an error. After a pause it watches again from the last
      // resourceVersion it saw (or lists again, if it never listed), keeping what it has.
      clearTimeout(this.#retry)
      this.#retry = setTimeout(() => {
        if (!this.#stopped) informer.start().catch((e: unknown) => onError(new DiscoveryError(`EndpointSlices in '${namespace}': ${describeError(e)}`)))
      }, delay)
      this.#retry.unref()
      delay = Math.min(delay * 2, RETRY_MS.max)
    })
    if (this.#stopped) return
    await informer.start()
  }

  async stop(): Promise<void> {
    this.#stopped = true
    clearTimeout(this.#retry)
    await this.#informer?.stop()
  }
}

/**
 * The status and the API server's own message: an ApiException's message holds the whole
 * answer, its headers (a Date among them) too, which would make every retry a new error.
 */
export function describeError(err: unknown): string {
  if (err instanceof Error) {
    const e = err as Error & { code?: unknown; statusCode?: unknown; body?: unknown }
    return [e.statusCode ?? e.code, statusMessage(e.body) ?? e.message].filter((x) => x !== undefined && x !== '').join(' ')
  }
  return String(err)
}

/** The `message` of a Status object, as the body of an API error (JSON text or parsed). */
function statusMessage(body: unknown): string | undefined {
  let b = body
  if (typeof b === 'string') {
    try {
      b = JSON.parse(b)
    } catch {
      return undefined
    }
  }
  const m = b !== null && typeof b === 'object' ? (b as { message?: unknown }).message : undefined
  return typeof m === 'string' && m !== '' ? m : undefined
}
