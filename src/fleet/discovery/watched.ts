// A list-and-watch of one Kubernetes collection (an InferencePool, the Pods it selects, the
// Pods whose role labels an EndpointSlice source reads), kept through the API server's errors.
import type { KubeConfig, KubernetesListObject, KubernetesObject, ListWatch, Watch } from '@kubernetes/client-node'
import { describeError, RETRY_MS } from './kube-client.js'
import { DiscoveryError } from './source.js'

type K8s = typeof import('@kubernetes/client-node')

/**
 * A list-and-watch of one collection that retries after an error (1 s, doubling up to 30 s,
 * from the last version it saw) and keeps what it had meanwhile; once stopped, it neither
 * reports nor leaves a watch open, even one that was being set up as it stopped.
 */
export class Watched<T extends KubernetesObject> {
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
    /** Each time a watch is open again (after a list, or resumed from the last version): it answers. */
    onWatching?: () => void,
  ) {
    this.#what = what
    this.#onError = onError
    const watch = new k8s.Watch(kc)
    const guarded = {
      watch: async (...args: Parameters<Watch['watch']>) => {
        const c = await watch.watch(...args)
        if (this.#stopped) c.abort()
        else onWatching?.()
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
