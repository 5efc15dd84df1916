// Whether a KV-event subscriber has reached its publisher, and why not. ZeroMQ retries a
// connection by itself, forever and silently: a wrong port, a publisher not started (vLLM
// without --kv-events-config) or a firewall would leave the view waiting with nothing said.
// So a subscriber that has not completed ZeroMQ's handshake with its publisher within
// warnMs (of starting, or of losing it) logs one warning naming the address and what was
// seen: connections refused, a peer that is no ZeroMQ publisher (the instance's HTTP port,
// say), or no answer at all. `connect` alone is only TCP: the handshake is what says a
// publisher answered.
import type { Observer } from 'zeromq'

/** How long a subscriber may go without reaching its publisher before a warning (kvEvents.connectWarnMs). */
export const DEFAULT_CONNECT_WARN_MS = 5000

/** `kind` tells lines apart for a rate limiter: connect, disconnect, unreachable, or reached after that warning. */
export interface ReachLog {
  warn(kind: 'disconnect' | 'unreachable', msg: string, fields: object): void
  info(kind: 'connect' | 'reached', msg: string, fields: object): void
}

export class PublisherReach {
  /** A ZeroMQ handshake with the publisher completed, and the connection has not dropped since. */
  reached = false
  /** Why the publisher is not reached, once warnMs have passed without it; null otherwise. */
  problem: string | null = null
  readonly #instance: string
  readonly #endpoint: string
  readonly #warnMs: number
  readonly #log: ReachLog
  #timer: NodeJS.Timeout | undefined
  #since = 0
  #attempts = 0
  #tcp = false
  #handshakeError: string | undefined
  #stopped = false

  constructor(events: Observer, instance: string, endpoint: string, warnMs: number, log: ReachLog) {
    if (!(Number.isInteger(warnMs) && warnMs >= 1)) throw new RangeError(`connectWarnMs must be a positive integer; got ${JSON.stringify(warnMs)}`)
    this.#instance = instance
    this.#endpoint = endpoint
    this.#warnMs = warnMs
    this.#log = log
    events.on('connect', () => (this.#tcp = true))
    events.on('connect:retry', () => this.#attempts++)
    for (const e of ['handshake:error:protocol', 'handshake:error:auth', 'handshake:error:other'] as const) {
      events.on(e, (ev) => (this.#handshakeError = ev.error.message))
    }
    events.on('handshake', () => {
      const warned = this.problem !== null
      this.reached = true
      this.problem = null
      clearTimeout(this.#timer)
      this.#log.info(warned ? 'reached' : 'connect', `kv events: ${instance} connected to ${endpoint}${warned ? ` after ${Math.round(performance.now() - this.#since)} ms` : ''}`, {})
    })
    // A peer that is no publisher connects and drops every ~100 ms: only a publisher reached is worth a line.
    events.on('disconnect', () => {
      if (!this.reached) return
      this.reached = false
      this.#log.warn('disconnect', `kv events: ${instance} disconnected from ${endpoint}`, {})
      this.#arm()
    })
    this.#arm()
  }

  stop(): void {
    this.#stopped = true
    clearTimeout(this.#timer)
  }

  #arm(): void {
    if (this.#stopped) return
    this.#since = performance.now()
    this.#attempts = 0
    this.#tcp = false
    this.#handshakeError = undefined
    clearTimeout(this.#timer)
    this.#timer = setTimeout(() => this.#warn(), this.#warnMs)
    this.#timer.unref()
  }

  #warn(): void {
    if (this.#stopped || this.reached) return
    this.problem = this.#why()
    this.#log.warn(
      'unreachable',
      `kv events: ${this.#instance}'s publisher at ${this.#endpoint} is not reached after ${this.#warnMs} ms: ${this.problem}; ZeroMQ keeps retrying. Check the port (--kv-events-port, or the instance's kvEvents.endpoint) and that vLLM runs with --kv-events-config publishing there`,
      { attempts: this.#attempts, connectWarnMs: this.#warnMs },
    )
  }

  #why(): string {
    if (this.#handshakeError !== undefined || this.#tcp) {
      return `something listens there but is not a ZeroMQ publisher (${this.#handshakeError ?? 'it closed the connection at the handshake'})`
    }
    if (this.#attempts > 0) return `the connection failed ${this.#attempts} time(s) (refused or unreachable)`
    return 'no answer (the connection attempt is still pending)'
  }
}
