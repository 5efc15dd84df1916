// The prefill pods a decode pod's sidecar sends to: the allow list and one connection pool per
// pod the endpoint picker has named, kept apart from the sidecar's request path so that the
// proxy's core can own it without importing that path.
import { Instance } from '../../fleet/instance.js'
import { PrefillAllow } from './prefill-allow.js'

/** Connection pools kept for the prefill pods the picker names, at most this many (the oldest closed first). */
const MAX_PODS = 256

/** The prefill pods a sidecar sends to: which it may, and a pool for each it has. */
export class PrefillPods {
  readonly allow: PrefillAllow
  readonly #pods = new Map<string, Instance>()

  constructor(
    allow: readonly string[],
    private readonly upstream: ConstructorParameters<typeof Instance>[3],
  ) {
    this.allow = new PrefillAllow(allow)
  }

  /** The pod at host:port, as an instance with its own pool. */
  at(host: string, port: number): Instance {
    const key = `${host.includes(':') ? `[${host}]` : host}:${port}`
    let i = this.#pods.get(key)
    if (i !== undefined) {
      // Most recently used last: the first in the map is the one to close when full.
      this.#pods.delete(key)
      this.#pods.set(key, i)
      return i
    }
    if (this.#pods.size >= MAX_PODS) {
      const [oldest, inst] = this.#pods.entries().next().value as [string, Instance]
      this.#pods.delete(oldest)
      void inst.close()
    }
    i = new Instance(`http://${key}`, 1, [], this.upstream)
    this.#pods.set(key, i)
    return i
  }

  async close(): Promise<void> {
    const all = [...this.#pods.values()]
    this.#pods.clear()
    await Promise.all(all.map((i) => i.close()))
  }
}
