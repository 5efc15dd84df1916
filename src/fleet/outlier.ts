// Passive outlier detection, after Envoy's: each answer an instance gives (or fails to give)
// is counted, and a run of failures ejects it from routing for a time that grows with every
// ejection. Health probes only say whether an instance answers /health; this catches the one
// that answers /health and fails every request, which least-outstanding routing would
// otherwise favour (it is never busy, because it fails fast).
import type { Config } from '../config/config.js'

export type OutlierConfig = Config['outlier']

/** How one try on an instance ended, as far as the instance's health is concerned. */
export type TryResult = 'ok' | '5xx' | 'gateway'

/** Why an instance was ejected: the counter that reached its limit. */
export type EjectionReason = 'consecutive_5xx' | 'consecutive_gateway_failure'

export class OutlierState {
  #consecutive5xx = 0
  #consecutiveGateway = 0
  /** Ejections so far, less one for every base ejection time spent back in rotation. */
  #multiplier = 0
  #returnedAt = 0
  /** Epoch ms until which the instance is out of rotation; 0 when it is in. */
  ejectedUntil = 0
  ejections = 0

  get ejected(): boolean {
    return this.ejectedUntil !== 0
  }

  /**
   * Counts one try. Returns the reason when this try completes a run that calls for an
   * ejection (the caller decides whether the endpoint can afford one, then calls eject).
   * Gateway failures (502/503/504, refused or reset connections, timeouts) are 5xx too.
   */
  record(result: TryResult, c: OutlierConfig): EjectionReason | undefined {
    if (result === 'ok') {
      this.#consecutive5xx = 0
      this.#consecutiveGateway = 0
      return undefined
    }
    this.#consecutive5xx++
    if (result === 'gateway') this.#consecutiveGateway++
    else this.#consecutiveGateway = 0
    if (this.ejected) return undefined
    if (c.consecutiveGatewayFailure > 0 && this.#consecutiveGateway >= c.consecutiveGatewayFailure) return 'consecutive_gateway_failure'
    if (c.consecutive5xx > 0 && this.#consecutive5xx >= c.consecutive5xx) return 'consecutive_5xx'
    return undefined
  }

  /** Takes the instance out until now + base × (ejections, decayed), capped; returns that time. */
  eject(now: number, c: OutlierConfig): number {
    if (this.#returnedAt > 0 && c.baseEjectionTimeMs > 0) {
      this.#multiplier = Math.max(0, this.#multiplier - Math.floor((now - this.#returnedAt) / c.baseEjectionTimeMs))
    }
    this.#multiplier++
    this.ejections++
    const ms = Math.min(c.baseEjectionTimeMs * this.#multiplier, Math.max(c.baseEjectionTimeMs, c.maxEjectionTimeMs))
    this.ejectedUntil = now + ms
    this.#consecutive5xx = 0
    this.#consecutiveGateway = 0
    return ms
  }

  /** Back in rotation (its ejection time is over and a probe passed). */
  restore(now: number): void {
    this.ejectedUntil = 0
    this.#returnedAt = now
  }
}

/** How many of `total` instances may be ejected at once: a share, but one of two or more. */
export function maxEjected(total: number, percent: number): number {
  if (total < 2 || percent <= 0) return 0
  return Math.min(total - 1, Math.max(1, Math.floor((total * percent) / 100)))
}
