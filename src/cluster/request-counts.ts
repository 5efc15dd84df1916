// Requests per instance across the workers, for the primary's /admin/instances: each live
// worker's latest report, plus what workers that have exited had counted.
import type { Worker } from 'node:cluster'
import type { RequestCounts } from './messages.js'

export class WorkerRequestCounts {
  #live = new Map<Worker, RequestCounts>()
  #gone: RequestCounts = {}

  report(worker: Worker, counts: RequestCounts): void {
    this.#live.set(worker, counts)
  }

  /** The worker has exited: its counts stay in the total. */
  retire(worker: Worker): void {
    this.#gone = add(this.#gone, this.#live.get(worker) ?? {})
    this.#live.delete(worker)
  }

  total(): RequestCounts {
    let t = this.#gone
    for (const c of this.#live.values()) t = add(t, c)
    return t
  }
}

function add(a: RequestCounts, b: RequestCounts): RequestCounts {
  const out: RequestCounts = {}
  for (const c of [a, b]) {
    for (const [ep, byInstance] of Object.entries(c)) {
      const o = (out[ep] ??= {})
      for (const [id, n] of Object.entries(byInstance)) o[id] = (o[id] ?? 0) + n
    }
  }
  return out
}
