// What the Kubernetes sources share: where their credentials come from, how long they wait
// after a failure, and how an API error reads in the logs.
import { existsSync } from 'node:fs'
import { homedir } from 'node:os'
import { join } from 'node:path'
import type { KubeConfig } from '@kubernetes/client-node'
import { DiscoveryError } from './source.js'

export const SERVICE_ACCOUNT = '/var/run/secrets/kubernetes.io/serviceaccount'
/** After a failed list or watch, the next try waits this long, doubling up to the cap. */
export const RETRY_MS = { first: 1000, max: 30_000 }

/** In-cluster credentials when running in a pod, else the kubeconfig (KUBECONFIG or ~/.kube/config). */
export function loadKubeConfig(kc: KubeConfig): void {
  if (process.env.KUBERNETES_SERVICE_HOST && existsSync(join(SERVICE_ACCOUNT, 'token'))) return kc.loadFromCluster()
  const file = process.env.KUBECONFIG?.split(':').find(Boolean) ?? join(homedir(), '.kube', 'config')
  if (!existsSync(file)) throw new DiscoveryError(`no in-cluster credentials and no kubeconfig: '${file}' does not exist`)
  kc.loadFromDefault()
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
