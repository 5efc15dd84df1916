// Instances from a Gateway API Inference Extension InferencePool
// (inference.networking.k8s.io/v1): the pool is watched for its selector and target ports,
// and the Pods its selector finds are watched in turn, as the reference endpoint picker
// does. Every ready pod is an instance on each target port. The client library is loaded
// only when such a source is configured.
import { existsSync, readFileSync } from 'node:fs'
import { join } from 'node:path'
import type { KubeConfig, KubernetesListObject, KubernetesObject, ListWatch, V1Pod, Watch } from '@kubernetes/client-node'
import { requireFeature } from '../../core/optional-packages.js'
import { describeError, loadKubeConfig, RETRY_MS, SERVICE_ACCOUNT } from './kubernetes.js'
import type { InferencePoolSourceConfig } from './schema.js'
import { DiscoveryError, entry, hostPort, type DiscoverySource, type InstanceEntry } from './source.js'

export const POOL_GROUP = 'inference.networking.k8s.io'
export const POOL_VERSION = 'v1'

/** The part of an InferencePool this source reads. */
export interface InferencePool extends KubernetesObject {
  spec?: {
    selector?: { matchLabels?: Record<string, string> }
    targetPorts?: { number?: number }[]
  }
}

/**
 * The pool's namespace: the configured one, else the pod's own (its service account's
 * namespace file). Outside a cluster there is none to default to.
 */
export function poolNamespace(cfg: InferencePoolSourceConfig, serviceAccount = SERVICE_ACCOUNT): string {
  if (cfg.namespace !== undefined) return cfg.namespace
  const file = join(serviceAccount, 'namespace')
  const ns = existsSync(file) ? readFileSync(file, 'utf8').trim() : ''
  if (ns === '') throw new DiscoveryError(`inferencePool '${cfg.name}' needs a namespace: not in a cluster ('${file}' does not exist)`)
  return ns
}

/**
 * The pool's `spec.selector.matchLabels` as a label selector (`a=b,c=d`, keys sorted so that
 * an unchanged selector reads the same); undefined when it selects nothing (the CRD requires
 * a label at least, and an empty selector would otherwise take every pod of the namespace).
 */
export function poolSelector(pool: InferencePool): string | undefined {
  const labels = Object.entries(pool.spec?.selector?.matchLabels ?? {}).sort(([a], [b]) => (a < b ? -1 : a > b ? 1 : 0))
  return labels.length === 0 ? undefined : labels.map(([k, v]) => `${k}=${v}`).join(',')
}

/** Running, Ready=True, not being deleted, with an IP: a pod the pool may send to. */
export function podServes(pod: V1Pod): boolean {
  if (pod.metadata?.deletionTimestamp !== undefined && pod.metadata.deletionTimestamp !== null) return false
  if (pod.status?.phase !== 'Running' || !pod.status.podIP) return false
  return pod.status.conditions?.find((c) => c.type === 'Ready')?.status === 'True'
}

/** Every serving pod the pool selects, on every one of its target ports, sorted. */
export function poolInstances(pool: InferencePool, pods: readonly V1Pod[], scheme: 'http' | 'https'): InstanceEntry[] {
  const valid = (n: number | undefined): n is number => n !== undefined && Number.isInteger(n) && n >= 1 && n <= 65535
  const ports = [...new Set((pool.spec?.targetPorts ?? []).map((p) => p.number).filter(valid))]
  const match = Object.entries(pool.spec?.selector?.matchLabels ?? {})
  if (match.length === 0) return []
  const urls = new Set<string>()
  for (const pod of pods) {
    const labels = pod.metadata?.labels ?? {}
    if (!match.every(([k, v]) => labels[k] === v) || !podServes(pod)) continue
    for (const port of ports) urls.add(`${scheme}://${hostPort(pod.status!.podIP!, port)}`)
  }
  return [...urls].sort().map(entry)
}

type K8s = typeof import('@kubernetes/client-node')

/**
 * A list-and-watch of one collection that retries after an error (1 s, doubling up to 30 s,
 * from the last version it saw) and keeps what it had meanwhile; once stopped, it neither
 * reports nor leaves a watch open, even one that was being set up as it stopped.
 */
class Watched<T extends KubernetesObject> {
  readonly informer: ListWatch<T>
  /** It has listed once: its cache is the collection, not a part of it. */
  listed = false
  #stopped = false
  #retry: NodeJS.Timeout | undefined
  #delay = RETRY_MS.first
  readonly #what: string
  readonly #onError: (err: Error) => void

  constructor(
    k8s: K8s,
    kc: KubeConfig,
    path: string,
    list: () => Promise<KubernetesListObject<T>>,
    selectors: { label?: string; field?: string },
    what: string,
    onEvent: () => void,
    onError: (err: Error) => void,
  ) {
    this.#what = what
    this.#onError = onError
    const watch = new k8s.Watch(kc)
    const guarded = {
      watch: async (...args: Parameters<Watch['watch']>) => {
        const c = await watch.watch(...args)
        if (this.#stopped) c.abort()
        return c
      },
    } as Watch
    const answered = () => {
      if (this.#stopped) return
      this.#delay = RETRY_MS.first // it answers: the next failure starts the back-off afresh
      onEvent()
    }
    this.informer = new k8s.ListWatch<T>(
      path,
      guarded,
      async () => {
        if (this.#stopped) throw new Error('stopped')
        const l = await list()
        this.listed = true
        answered() // also when the list is empty or unchanged, which fires no event
        return l
      },
      false,
      selectors.label,
      selectors.field,
    )
    this.informer.on('add', answered)
    this.informer.on('update', answered)
    this.informer.on('delete', answered)
    this.informer.on('error', (err: unknown) => this.#failed(err))
  }

  start(): void {
    if (this.#stopped) return
    this.informer.start().catch((err: unknown) => this.#failed(err))
  }

  #failed(err: unknown): void {
    if (this.#stopped) return
    this.#onError(new DiscoveryError(`${this.#what}: ${describeError(err)}`))
    // The informer stops on an error; after a pause it watches again from the last
    // resourceVersion it saw (or lists again, if it never listed), keeping what it has.
    clearTimeout(this.#retry)
    this.#retry = setTimeout(() => this.start(), this.#delay)
    this.#retry.unref()
    this.#delay = Math.min(this.#delay * 2, RETRY_MS.max)
  }

  async stop(): Promise<void> {
    this.#stopped = true
    clearTimeout(this.#retry)
    await this.informer.stop()
  }
}

export class InferencePoolSource implements DiscoverySource {
  readonly #cfg: InferencePoolSourceConfig
  #pool: Watched<InferencePool> | undefined
  #pods: { selector: string; watched: Watched<V1Pod> } | undefined
  #stopped = false

  constructor(cfg: InferencePoolSourceConfig) {
    this.#cfg = cfg
  }

  start(onChange: (list: InstanceEntry[]) => void, onError: (err: Error) => void): void {
    void this.#start(onChange, onError).catch((err: Error) => onError(new DiscoveryError(`inferencePool discovery cannot start: ${err.message}`)))
  }

  async #start(onChange: (list: InstanceEntry[]) => void, onError: (err: Error) => void): Promise<void> {
    requireFeature('kubernetes')
    const k8s = await import('@kubernetes/client-node')
    const kc = new k8s.KubeConfig()
    loadKubeConfig(kc)
    const { name, scheme } = this.#cfg
    const namespace = poolNamespace(this.#cfg)
    const custom = kc.makeApiClient(k8s.CustomObjectsApi)
    const core = kc.makeApiClient(k8s.CoreV1Api)
    const what = `InferencePool '${namespace}/${name}'`
    const fieldSelector = `metadata.name=${name}`

    // One report per burst: a list applies its objects one event at a time, and a list in
    // between would be half old, half new.
    let pending = false
    const report = () => {
      if (pending) return
      pending = true
      setImmediate(() => {
        pending = false
        if (!this.#stopped) sync()
      })
    }
    const sync = () => {
      if (!pool.listed) return
      const p = pool.informer.list().find((o) => o.metadata?.name === name && !o.metadata.deletionTimestamp)
      const selector = p && poolSelector(p)
      if (selector !== this.#pods?.selector) {
        // The selector changed (or the pool came or went): the pods are those of the new one.
        void this.#pods?.watched.stop()
        this.#pods = undefined
        if (selector !== undefined) {
          const watched = new Watched<V1Pod>(
            k8s,
            kc,
            `/api/v1/namespaces/${namespace}/pods`,
            () => core.listNamespacedPod({ namespace, labelSelector: selector }),
            { label: selector },
            `Pods of ${what} (${selector})`,
            report,
            onError,
          )
          this.#pods = { selector, watched }
          watched.start()
        }
      }
      // No pool, or one selecting nothing: no instance. Otherwise the list waits for the
      // new selector's pods, so that a change of selector does not empty the endpoint.
      if (p === undefined || this.#pods === undefined) return onChange([])
      if (this.#pods.watched.listed) onChange(poolInstances(p, this.#pods.watched.informer.list(), scheme))
    }

    const pool = new Watched<InferencePool>(
      k8s,
      kc,
      `/apis/${POOL_GROUP}/${POOL_VERSION}/namespaces/${namespace}/inferencepools`,
      () => custom.listNamespacedCustomObject({ group: POOL_GROUP, version: POOL_VERSION, namespace, plural: 'inferencepools', fieldSelector }) as Promise<KubernetesListObject<InferencePool>>,
      { field: fieldSelector },
      what,
      report,
      onError,
    )
    this.#pool = pool
    if (this.#stopped) return
    pool.start()
  }

  async stop(): Promise<void> {
    this.#stopped = true
    await Promise.all([this.#pool?.stop(), this.#pods?.watched.stop()])
  }
}
