// Instances from Kubernetes: the EndpointSlices of a Service (or of a label selector),
// listed and then watched through the API server, each ready address an instance. The
// client library is loaded only when such a source is configured: it is large.
//
// Roles: the pods say theirs in a label (llm-d's `llm-d.ai/role`), but an EndpointSlice
// carries no pod labels, only each endpoint's targetRef (the pod's name). The source reads
// the labelled pods of the namespace beside the slices and joins them by that name, so that
// one Service over the prefill and the decode pods, the way llm-d deploys them, is enough;
// a Service per role with `role:` on each source works too (set roleLabel: false to read no
// pods: that takes no access to pods). Endpoints whose pod has no label take the source's role.
import type { V1EndpointSlice, V1Pod } from '@kubernetes/client-node'
import type { Role } from '../../config/disaggregation.js'
import { requireFeature } from '../../core/optional-packages.js'
import { describeError, loadKubeConfig, RETRY_MS } from './kube-client.js'
import { roleFromLabels, unknownRoleNote } from './role-label.js'
import type { KubernetesSourceConfig } from '../../config/discovery.js'
import { DiscoveryError, entry, hostPort, type DiscoverySource, type InstanceEntry } from './source.js'
import { Watched } from './watched.js'

type Informer = { start(): Promise<void>; stop(): Promise<void>; list(): readonly V1EndpointSlice[] }

/** The selector that finds the slices: the Service's own label, and the one given. */
export function selectorOf(cfg: KubernetesSourceConfig): string {
  return [cfg.service !== undefined ? `kubernetes.io/service-name=${cfg.service}` : undefined, cfg.labelSelector].filter(Boolean).join(',')
}

/** The labelled pods by name, and the label values found that name no role (filled in). */
export interface PodRoles {
  labels: ReadonlyMap<string, Record<string, string> | undefined>
  unknown: { pod: string; value: string }[]
}

/**
 * Instance URLs of the ready endpoints in the slices, on the port chosen by `cfg.port`, each
 * with its pod's role when `pods` has the pod (an encode-only pod is no instance), else the
 * source's role.
 */
export function instancesOf(slices: readonly V1EndpointSlice[], cfg: KubernetesSourceConfig, pods?: PodRoles): InstanceEntry[] {
  const byUrl = new Map<string, Role>()
  const fallback = cfg.role ?? 'both'
  for (const s of slices) {
    const port =
      typeof cfg.port === 'number' ? cfg.port : cfg.port === undefined ? s.ports?.find((p) => p.port !== undefined)?.port : s.ports?.find((p) => p.name === cfg.port)?.port
    if (port === undefined) continue
    for (const ep of s.endpoints ?? []) {
      // An unset condition means ready (the API's own reading of it).
      if (ep.conditions?.ready === false) continue
      let role = fallback
      const pod = ep.targetRef?.kind === 'Pod' ? ep.targetRef.name : undefined
      if (pods !== undefined && pod !== undefined && cfg.roleLabel !== false) {
        const r = roleFromLabels(pods.labels.get(pod), cfg.roleLabel)
        if (r !== undefined && 'encodeOnly' in r) continue
        if (r !== undefined && 'unknown' in r && !pods.unknown.some((u) => u.pod === pod)) pods.unknown.push({ pod, value: r.unknown })
        if (r !== undefined && 'role' in r) role = r.role
      }
      for (const a of ep.addresses) byUrl.set(`${cfg.scheme}://${hostPort(a, port)}`, role)
    }
  }
  return [...byUrl.keys()].sort().map((url) => ({ ...entry(url), role: byUrl.get(url)! }))
}

export class KubernetesSource implements DiscoverySource {
  readonly #cfg: KubernetesSourceConfig
  #informer: Informer | undefined
  #pods: Watched<V1Pod> | undefined
  #retry: NodeJS.Timeout | undefined
  #stopped = false

  constructor(cfg: KubernetesSourceConfig) {
    this.#cfg = cfg
  }

  start(onChange: (list: InstanceEntry[], partial?: Error) => void, onError: (err: Error) => void): void {
    void this.#start(onChange, onError).catch((err: Error) => onError(new DiscoveryError(`kubernetes discovery cannot start: ${err.message}`)))
  }

  async #start(onChange: (list: InstanceEntry[], partial?: Error) => void, onError: (err: Error) => void): Promise<void> {
    requireFeature('kubernetes')
    const k8s = await import('@kubernetes/client-node')
    const kc = new k8s.KubeConfig()
    loadKubeConfig(kc)
    const namespace = this.#cfg.namespace ?? kc.getContextObject(kc.getCurrentContext())?.namespace ?? 'default'
    const labelSelector = selectorOf(this.#cfg)
    const api = kc.makeApiClient(k8s.DiscoveryV1Api)
    const { roleLabel } = this.#cfg
    // The slices listed once, and the pods' labels read once or failed: before both, a list
    // would be empty, or give the labelled pods the source's role for a moment.
    let slicesListed = false
    let podsFailed: string | undefined
    // One report per burst: a list applies its slices one event at a time, and a list in
    // between would be half old, half new.
    let pending = false
    let delay = RETRY_MS.first
    const report = () => {
      if (pending) return
      pending = true
      setImmediate(() => {
        pending = false
        if (this.#stopped || !slicesListed) return
        const pods = this.#pods
        if (pods !== undefined && !pods.listed && podsFailed === undefined) return
        const roles: PodRoles | undefined = pods === undefined ? undefined : { labels: new Map(pods.informer.list().map((p) => [p.metadata?.name ?? '', p.metadata?.labels])), unknown: [] }
        const list = instancesOf(informer.list(), this.#cfg, roles)
        onChange(list, this.#partial(roleLabel, podsFailed, pods?.listed ?? false, roles?.unknown ?? []))
      })
    }
    const list = async () => {
      const l = await api.listNamespacedEndpointSlice({ namespace, labelSelector })
      slicesListed = true
      delay = RETRY_MS.first // it answers: the next failure starts the back-off afresh
      report() // also when the list is empty or unchanged, which fires no event
      return l
    }
    const informer = k8s.makeInformer(kc, `/apis/discovery.k8s.io/v1/namespaces/${namespace}/endpointslices`, list, labelSelector)
    this.#informer = informer
    const changed = () => {
      delay = RETRY_MS.first
      report()
    }
    informer.on('add', changed)
    informer.on('update', changed)
    informer.on('delete', changed)
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
    if (roleLabel !== false) {
      const core = kc.makeApiClient(k8s.CoreV1Api)
      // Only the pods that carry the label (the selector `KEY` means "has it"): the others'
      // endpoints take the source's role without being read.
      const answered = () => {
        podsFailed = undefined
        report()
      }
      this.#pods = new Watched<V1Pod>(
        k8s,
        kc,
        `/api/v1/namespaces/${namespace}/pods`,
        () => core.listNamespacedPod({ namespace, labelSelector: roleLabel }),
        { label: roleLabel },
        `Pods' ${roleLabel} labels in '${namespace}'`,
        answered,
        (err) => {
          podsFailed = err.message
          report()
        },
        answered,
      )
    }
    if (this.#stopped) return
    this.#pods?.start()
    await informer.start()
  }

  /** What the list lacks: the pods' labels unread (and what that means), label values of no known role. */
  #partial(roleLabel: string | false, podsFailed: string | undefined, podsListed: boolean, unknown: { pod: string; value: string }[]): DiscoveryError | undefined {
    const fallback = this.#cfg.role ?? 'both'
    const notes: string[] = []
    if (podsFailed !== undefined) {
      notes.push(
        podsListed
          ? `${podsFailed}; the roles are the pods' as last read`
          : `${podsFailed}; every instance takes the source's role, ${fallback}: grant get/list/watch on pods, or set roleLabel: false on the source to read none`,
      )
    }
    if (roleLabel !== false && unknown.length > 0) notes.push(unknownRoleNote(roleLabel, unknown, fallback))
    if (notes.length === 0) return undefined
    const summary =
      podsFailed !== undefined && !podsListed
        ? "discovery source cannot read the pods' role labels; its instances take the source's role"
        : podsFailed !== undefined
          ? "discovery source answered in part; keeping the failed query's last answer"
          : 'discovery source found role labels it does not know; those instances take the source\'s role'
    return new DiscoveryError(notes.join('; '), { summary })
  }

  async stop(): Promise<void> {
    this.#stopped = true
    clearTimeout(this.#retry)
    await Promise.all([this.#informer?.stop(), this.#pods?.stop()])
  }
}
