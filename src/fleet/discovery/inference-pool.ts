// Instances from a Gateway API Inference Extension InferencePool
// (inference.networking.k8s.io/v1): the pool is watched for its selector and target ports,
// and the Pods its selector finds are watched in turn, as the reference endpoint picker
// does. Every ready pod is an instance on each target port. The client library is loaded
// only when such a source is configured.
import { existsSync, readFileSync } from 'node:fs'
import { join } from 'node:path'
import type { KubernetesListObject, KubernetesObject, V1Pod } from '@kubernetes/client-node'
import { requireFeature } from '../../core/optional-packages.js'
import { loadKubeConfig, SERVICE_ACCOUNT } from './kube-client.js'
import { Watched } from './watched.js'
import type { Role } from '../../config/disaggregation.js'
import { roleFromLabels, unknownRoleNote } from './role-label.js'
import type { InferencePoolSourceConfig } from '../../config/discovery.js'
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

/** How the pods' roles are read: the label, the role of pods without it, and the label values found that name no role (filled in). */
export interface PoolRoles {
  roleLabel: string | false
  role?: Role | undefined
  unknown?: { pod: string; value: string }[]
}

/**
 * Every serving pod the pool selects, on every one of its target ports, sorted; each with the
 * role its label gives (an encode-only pod is no instance), else the source's role.
 */
export function poolInstances(pool: InferencePool, pods: readonly V1Pod[], scheme: 'http' | 'https', roles: PoolRoles = { roleLabel: false }): InstanceEntry[] {
  const valid = (n: number | undefined): n is number => n !== undefined && Number.isInteger(n) && n >= 1 && n <= 65535
  const ports = [...new Set((pool.spec?.targetPorts ?? []).map((p) => p.number).filter(valid))]
  const match = Object.entries(pool.spec?.selector?.matchLabels ?? {})
  if (match.length === 0) return []
  const byUrl = new Map<string, Role>()
  for (const pod of pods) {
    const labels = pod.metadata?.labels ?? {}
    if (!match.every(([k, v]) => labels[k] === v) || !podServes(pod)) continue
    const r = roleFromLabels(labels, roles.roleLabel)
    if (r !== undefined && 'encodeOnly' in r) continue
    if (r !== undefined && 'unknown' in r) roles.unknown?.push({ pod: pod.metadata?.name ?? pod.status!.podIP!, value: r.unknown })
    const role = r !== undefined && 'role' in r ? r.role : (roles.role ?? 'both')
    for (const port of ports) byUrl.set(`${scheme}://${hostPort(pod.status!.podIP!, port)}`, role)
  }
  return [...byUrl.keys()].sort().map((url) => ({ ...entry(url), role: byUrl.get(url)! }))
}

export class InferencePoolSource implements DiscoverySource {
  readonly #cfg: InferencePoolSourceConfig
  #pool: Watched<InferencePool> | undefined
  #pods: { selector: string; watched: Watched<V1Pod> } | undefined
  #stopped = false

  constructor(cfg: InferencePoolSourceConfig) {
    this.#cfg = cfg
  }

  start(onChange: (list: InstanceEntry[], partial?: Error) => void, onError: (err: Error) => void): void {
    void this.#start(onChange, onError).catch((err: Error) => onError(new DiscoveryError(`inferencePool discovery cannot start: ${err.message}`)))
  }

  async #start(onChange: (list: InstanceEntry[], partial?: Error) => void, onError: (err: Error) => void): Promise<void> {
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
      if (!this.#pods.watched.listed) return
      const { role, roleLabel } = this.#cfg
      const unknown: { pod: string; value: string }[] = []
      const list = poolInstances(p, this.#pods.watched.informer.list(), scheme, { roleLabel, role, unknown })
      const note =
        roleLabel !== false && unknown.length > 0
          ? new DiscoveryError(unknownRoleNote(roleLabel, unknown, role ?? 'both'), { summary: "discovery source found role labels it does not know; those instances take the source's role" })
          : undefined
      onChange(list, note)
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
