// GET /metrics in the primary: every worker's registry and the primary's own, merged by
// prom-client's AggregatorRegistry. Request counters, histograms and connection gauges sum
// over the workers; the fleet's gauges (health, ejection, in flight) come from the primary
// alone, because workers do not register them (RouterMetrics' scope).
import type { Worker } from 'node:cluster'
import { AggregatorRegistry, Counter, Gauge, type Registry } from 'prom-client'
import type { WorkerMetrics } from './messages.js'

/** A worker that does not answer in this long is left out of the scrape rather than hang it. */
const WORKER_ANSWER_MS = 5000

export class ClusterMetrics {
  #next = 0
  #waiting = new Map<number, { worker: Worker; resolve(m: WorkerMetrics | undefined): void }>()
  readonly restarts: Counter

  constructor(
    private readonly registry: Registry,
    workers: () => number,
  ) {
    new Gauge({
      name: 'prefix_router_workers',
      help: 'Worker processes serving the front port (serve --workers), counting only those ready.',
      registers: [registry],
      collect() {
        this.set(workers())
      },
    })
    this.restarts = new Counter({
      name: 'prefix_router_worker_restarts_total',
      help: 'Worker processes that exited unasked and were replaced.',
      registers: [registry],
    })
  }

  /** The aggregated text, from the primary's registry and each worker's answer. */
  async text(workers: Iterable<Worker>): Promise<string> {
    const own = await this.registry.getMetricsAsJSON()
    const theirs = await Promise.all([...workers].map((w) => this.#ask(w)))
    return AggregatorRegistry.aggregate([own, ...theirs.filter((m) => m !== undefined)]).metrics()
  }

  #ask(worker: Worker): Promise<WorkerMetrics | undefined> {
    if (!worker.isConnected()) return Promise.resolve(undefined)
    const id = this.#next++
    return new Promise((resolve) => {
      const timer = setTimeout(() => this.#settle(id, undefined), WORKER_ANSWER_MS)
      timer.unref()
      this.#waiting.set(id, {
        worker,
        resolve: (m) => {
          clearTimeout(timer)
          resolve(m)
        },
      })
      worker.send({ prefixRouter: 'metrics', id }, (err: Error | null) => err && this.#settle(id, undefined))
    })
  }

  /** A worker's answer. */
  answered(id: number, metrics: WorkerMetrics): void {
    this.#settle(id, metrics)
  }

  /** A worker that exits answers nothing: its pending requests are settled without it. */
  gone(worker: Worker): void {
    for (const [id, w] of this.#waiting) if (w.worker === worker) this.#settle(id, undefined)
  }

  #settle(id: number, m: WorkerMetrics | undefined): void {
    const w = this.#waiting.get(id)
    if (w === undefined) return
    this.#waiting.delete(id)
    w.resolve(m)
  }
}
