// Prefill/decode disaggregation in virtual time: the pieces VirtualFleet's submitPrefill,
// submitDecode and submitBootstrap are made of. A decode engine reaches the prefill engine's
// held blocks directly (no sockets), on the fleet's one VirtualClock, through the same
// RemoteKvSource interface live workers implement over a side channel.
import type { Clock, TimerHandle } from './clock.js'
import type { SimEngine } from './engine.js'
import type { HoldEnd, KvHold } from './kv-holds.js'
import { prefillAnswer, type KvTransferParams } from './kv-params.js'
import type { PullRefusal, RemoteKvSource } from './kv-transfer.js'
import type { Sequence } from './sequence.js'

/**
 * A prefill leg's progress: `computing`, then `held` (its blocks wait for a decode leg),
 * `reading`, and how the hold ended (`read`, `expired`, `cancelled`, `restart`); `failed` if
 * the prefill itself did not finish (aborted, its engine restarted).
 */
export type PrefillState = 'computing' | 'held' | 'reading' | HoldEnd | 'failed'

/** What submitPrefill returns: the prefill leg as the router sees it, and what its answer carries. */
export class PrefillHandle {
  state: PrefillState = 'computing'
  /** Simulated ms the prefill finished (its answer left), -1 before. */
  doneAt = -1
  /** The blocks held for the decode leg, once done. */
  hold: KvHold | null = null
  private engineId = ''

  constructor(
    readonly instance: number,
    /** @internal the engine that holds the blocks */
    readonly engine: SimEngine,
    readonly requestId: string,
    readonly arrivalMs: number,
  ) {}

  /** vLLM's kv_transfer_params of the prefill's answer (remote_host "virtual", remote_port the instance); null until held. */
  get kvTransferParams(): KvTransferParams | null {
    if (this.hold === null) return null
    return prefillAnswer(this.engineId, this.hold, 'virtual', this.instance, this.engine.config.kv.tpSize)
  }

  /** @internal */
  held(hold: KvHold, at: number): void {
    this.hold = hold
    this.state = 'held'
    this.doneAt = at
    this.engineId = this.engine.kvEngineId
  }
}

/** Which legs a request ran: its KV came from the prefill leg (`pd`), or it was prefilled on the decode instance. */
export type PdLegs = 'pd' | 'local' | 'recomputed'

/** A disaggregated request's outcome, as its client saw it: times from the first leg's arrival. */
export interface PdResultExtra {
  legs: PdLegs
  /** The prefill leg's instance, -1 without one (invalid parameters). */
  prefillInstance: number
  /** When the decode leg arrived, and when the prefill leg finished (-1 if unknown). */
  decodeArrivalMs: number
  prefillDoneMs: number
  /** Simulated ms the KV transfer took, -1 without one. */
  transferMs: number
  /** Prompt tokens the decode instance had cached, and those it pulled. */
  localHitTokens: number
  pulledTokens: number
  /** Why it failed, when finishReason is `error`. */
  error: string | null
}

export function legsOf(seq: Sequence): PdLegs {
  if (seq.kvArrivedAt >= 0) return 'pd'
  return seq.recomputed ? 'recomputed' : 'local'
}

/**
 * Reads held blocks of `engine` under `id` (NIXL: the decode leg got the prefill's answer).
 * `refuse` set: the parameters name no engine of this fleet (or an engine since restarted).
 */
export class HoldSource implements RemoteKvSource {
  private reading = false

  constructor(
    private readonly engine: SimEngine | null,
    private readonly id: string,
    private readonly refuse: PullRefusal | null = null,
  ) {}

  attach(): void {
    // A decode with the request queued heartbeats until it reads: as good as held until then.
    if (this.refuse === null) this.engine!.holds.keepAlive(this.id)
  }

  begin(tokens: number, ready: (refusal: PullRefusal | null) => void): void {
    if (this.refuse !== null) return ready(this.refuse)
    const r = this.engine!.holds.beginRead(this.id, tokens)
    if (typeof r === 'string') return ready(r)
    this.reading = true
    ready(null)
  }

  finish(): void {
    this.engine!.holds.release(this.id, 'read', this.engine!.clock.now())
  }

  cancel(): void {
    if (this.refuse !== null) return
    // vLLM frees the prefill's blocks when a decode gives up: unless someone else is reading them.
    const h = this.engine!.holds.get(this.id)
    if (h !== undefined && (this.reading || h.state === 'held')) this.engine!.holds.release(this.id, 'cancelled', this.engine!.clock.now())
  }
}

/**
 * SGLang's bootstrap room, both legs sent at once: the decode registers on arrival and waits
 * for the prefill's blocks, for at most the decode engine's bootstrap timeout.
 */
export class Room {
  hold: KvHold | null = null
  failed: PullRefusal | null = null
  attached = false
  /** The decode's timeout, stopped once the prefill settles. */
  onSettle: (() => void) | null = null
  private waiter: (() => void) | null = null

  constructor(
    readonly id: string,
    readonly prefill: SimEngine,
  ) {}

  /** The prefill finished (hold) or cannot (null): wake the decode if it waits. */
  settle(hold: KvHold | null): void {
    if (hold === null) this.failed ??= `the prefill leg of bootstrap room ${this.id} did not finish`
    else {
      this.hold = hold
      if (this.attached) this.prefill.holds.keepAlive(this.id)
    }
    this.onSettle?.()
    this.onSettle = null
    const w = this.waiter
    this.waiter = null
    w?.()
  }

  wait(fn: () => void): void {
    if (this.hold !== null || this.failed !== null) fn()
    else this.waiter = fn
  }
}

export class RoomSource implements RemoteKvSource {
  private reading = false
  private timer: TimerHandle | null = null

  constructor(
    private readonly room: Room,
    private readonly clock: Clock,
    private readonly timeoutMs: number,
  ) {}

  attach(): void {
    const room = this.room
    room.attached = true
    if (room.hold !== null) room.prefill.holds.keepAlive(room.id)
    else if (room.failed === null) {
      room.onSettle = () => this.stop()
      this.timer = this.clock.schedule(this.clock.now() + this.timeoutMs, () => {
        this.timer = null
        if (room.hold === null) {
          room.failed ??= `bootstrap room ${room.id} timed out after ${this.timeoutMs} ms without its prefill leg`
          room.settle(null)
        }
      })
    }
  }

  begin(tokens: number, ready: (refusal: PullRefusal | null) => void): void {
    this.room.wait(() => {
      this.stop()
      if (this.room.failed !== null) return ready(this.room.failed)
      const r = this.room.prefill.holds.beginRead(this.room.id, tokens)
      if (typeof r === 'string') return ready(r)
      this.reading = true
      ready(null)
    })
  }

  finish(): void {
    this.room.prefill.holds.release(this.room.id, 'read', this.clock.now())
  }

  cancel(): void {
    this.stop()
    const h = this.room.prefill.holds.get(this.room.id)
    if (h !== undefined && (this.reading || h.state === 'held')) this.room.prefill.holds.release(this.room.id, 'cancelled', this.clock.now())
  }

  private stop(): void {
    if (this.timer !== null) this.clock.cancel(this.timer)
    this.timer = null
  }
}
