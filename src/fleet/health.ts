// An instance's health as probes see it, with rise and fall counts (as HAProxy and Envoy
// do): one slow or failed probe does not take a working instance out, and one lucky probe
// does not put a failing one back. The first probe decides at once, so that a router
// starting in front of a fleet does not wait several intervals for it.

export interface Thresholds {
  healthyThreshold: number
  unhealthyThreshold: number
}

export type Transition = 'up' | 'down' | undefined

export class HealthState {
  healthy = true
  /** Why it is down (or what last failed), for /admin/instances and the logs. */
  lastError: string | undefined
  #known = false
  #passes = 0
  #fails = 0
  /** Times traffic proved it down (fail), ever: a cluster worker waits for this to move (cluster/membership.ts). */
  failReports = 0

  /** Counts one probe; returns the transition it caused, if any. */
  probe(ok: boolean, error: string | undefined, t: Thresholds): Transition {
    if (ok) {
      this.#fails = 0
      this.#passes++
    } else {
      this.#passes = 0
      this.#fails++
      this.lastError = error
    }
    const first = !this.#known
    this.#known = true
    if (ok && !this.healthy && (first || this.#passes >= t.healthyThreshold)) {
      this.healthy = true
      this.lastError = undefined
      return 'up'
    }
    if (!ok && this.healthy && (first || this.#fails >= t.unhealthyThreshold)) {
      this.healthy = false
      return 'down'
    }
    if (ok && this.healthy) this.lastError = undefined
    return undefined
  }

  /** Traffic proved it down (the connection was refused): out at once, back by rise count. */
  fail(reason: string): Transition {
    this.failReports++
    this.#known = true
    this.#passes = 0
    this.lastError = reason
    if (!this.healthy) return undefined
    this.healthy = false
    return 'down'
  }
}
