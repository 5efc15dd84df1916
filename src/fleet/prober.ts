// The owner's health writing: active probes (health, models, metrics) on their intervals,
// and the return of an ejected instance once its time is served. Each change it makes is
// handed back to the owner (`changed`), which publishes it.
import type { Logger } from 'pino'
import type { Config } from '../config/config.js'
import type { Transition } from './health.js'
import type { Instance } from './instance.js'
import type { EjectionReason } from './outlier.js'
import { METRICS_PROBE_MAX_BYTES } from './cache-metrics.js'
import { probeHealth, probeMetrics, probeModels, type ModelsProbe } from './probe.js'

export interface ProbeTargets {
  /** The instances probed each round (the members: those joining are probed by their join). */
  instances(): Iterable<Instance>
  /** Health, models or an ejection changed: the owner publishes. */
  changed(): void
  ejected(inst: Instance, reason: EjectionReason): void
}

export class Prober {
  #config: Config
  readonly #log: Logger
  readonly #targets: ProbeTargets
  #timers: NodeJS.Timeout[] = []
  #returns = new Set<NodeJS.Timeout>()
  #closed = false

  constructor(config: Config, log: Logger, targets: ProbeTargets) {
    this.#config = config
    this.#log = log
    this.#targets = targets
  }

  configure(config: Config): void {
    this.#config = config
  }

  /** Probes were started (a reload restarts them with the new intervals). */
  get running(): boolean {
    return this.#timers.length > 0
  }

  /** Closed with the endpoint: a probe cut short by the close says nothing about the instance. */
  get closed(): boolean {
    return this.#closed
  }

  /** One round of probes: health, models, metrics. Resolves when all have answered. */
  async probeAll(): Promise<void> {
    await Promise.all([...this.#targets.instances()].map((inst) => this.probeOne(inst)))
    if (!this.#closed) this.#targets.changed()
  }

  async probeOne(inst: Instance): Promise<void> {
    const { health, discovery } = this.#config
    const [r, models] = await Promise.all([probeHealth(inst, health.path, health.timeoutMs), probeModels(inst, health.timeoutMs)])
    if (this.#closed) return
    this.changed(inst, inst.health.probe(r.ok, r.error, health))
    this.#modelsFound(inst, models)
    if (r.ok && discovery.metricsIntervalMs > 0) await this.#probeMetrics(inst)
  }

  /** The cache probe of one instance; a page cut at its bound is counted, and said once per instance. */
  async #probeMetrics(inst: Instance): Promise<void> {
    const problem = await probeMetrics(inst, this.#config.health.timeoutMs)
    if (problem === undefined || this.#closed) return
    if (inst.metricsPagesCut++ === 0) this.#log.warn({ instance: inst.id, maxBytes: METRICS_PROBE_MAX_BYTES }, `metrics probe: ${problem}`)
  }

  /** What GET /v1/models found: the models taken, a refused probe logged once and shown as the instance's error. */
  #modelsFound(inst: Instance, m: ModelsProbe | undefined): void {
    if (m === undefined) return
    if ('error' in m) {
      if (inst.discoveryError !== m.error) this.#log.warn({ instance: inst.id, reason: m.error }, 'model discovery failed')
      inst.discoveryError = m.error
      return
    }
    if (inst.discoveryError !== undefined) this.#log.info({ instance: inst.id }, 'model discovery works again')
    inst.discoveryError = undefined
    inst.setDiscoveredModels(m)
  }

  /** A health transition, logged; an instance back up has its ejection lifted. */
  changed(inst: Instance, t: Transition): void {
    if (t === 'down') this.#log.warn({ instance: inst.id, reason: inst.lastError }, 'instance down')
    else if (t === 'up') {
      // Down and back up (a restart): the failures that ejected it were its going down, not a
      // fault that outlives it. One that never failed a probe stays ejected for its time.
      const lifted = inst.outlier.ejected
      if (lifted) inst.outlier.restore(Date.now())
      this.#log.info({ instance: inst.id, ...(lifted && { ejectionLifted: true }) }, 'instance up')
    }
  }

  /** Ejects the instance for its time; then a probe that passes returns it to rotation (while `member` still holds). */
  eject(inst: Instance, reason: EjectionReason, member: (inst: Instance) => boolean): void {
    const ms = inst.outlier.eject(Date.now(), this.#config.outlier)
    this.#log.warn({ instance: inst.id, reason, ejectionMs: ms, ejections: inst.outlier.ejections }, 'instance ejected')
    this.#targets.ejected(inst, reason)
    this.#targets.changed()
    const t = setTimeout(() => {
      this.#returns.delete(t)
      void this.#tryReturn(inst, member)
    }, ms)
    t.unref()
    this.#returns.add(t)
  }

  async #tryReturn(inst: Instance, member: (inst: Instance) => boolean): Promise<void> {
    if (!member(inst) || !inst.outlier.ejected) return
    const { health } = this.#config
    const r = await probeHealth(inst, health.path, health.timeoutMs)
    inst.outlier.restore(Date.now())
    if (r.ok) this.#log.info({ instance: inst.id }, 'instance returned after ejection')
    else this.changed(inst, inst.health.fail(`after ejection: ${r.error ?? 'probe failed'}`))
    this.#targets.changed()
  }

  start(): void {
    this.stop()
    const { health, discovery } = this.#config
    const every = (ms: number, fn: () => Promise<void>) => {
      if (ms <= 0) return
      const t = setInterval(() => void fn(), ms)
      t.unref()
      this.#timers.push(t)
    }
    // A probe cut short by close() (its connections destroyed) says nothing about the instance.
    const each = (fn: (i: Instance) => Promise<void>) => async () => {
      await Promise.all([...this.#targets.instances()].map(fn))
      if (!this.#closed) this.#targets.changed()
    }
    every(
      health.intervalMs,
      each(async (i) => {
        const r = await probeHealth(i, health.path, health.timeoutMs)
        if (!this.#closed) this.changed(i, i.health.probe(r.ok, r.error, health))
      }),
    )
    every(
      discovery.modelsIntervalMs,
      each(async (i) => {
        this.#modelsFound(i, await probeModels(i, health.timeoutMs))
      }),
    )
    every(discovery.metricsIntervalMs, each((i) => this.#probeMetrics(i)))
  }

  stop(): void {
    for (const t of this.#timers) clearInterval(t)
    this.#timers = []
  }

  close(): void {
    this.#closed = true
    this.stop()
    for (const t of this.#returns) clearTimeout(t)
    this.#returns.clear()
  }
}
