// A prefill instance's held KV blocks, after vLLM's NixlConnector: a prefill-leg request that
// finished keeps its blocks pinned (they count as used, so they shrink what others can
// allocate) until the decode side has read them, or until its lease runs out with nobody
// having asked for them. Freed blocks stay cached (evictable), as any finished request's do.
//
// Leases: a hold starts with `leaseMs` (vLLM's kv_lease_duration, 30 s). renew() is a
// decode's heartbeat (another lease from now); keepAlive() is a decode that has the request
// queued and will surely read or cancel it (the virtual fleet, whose decodes never crash);
// beginRead() starts the read, after which only release() ends the hold.
import type { Clock, TimerHandle } from './clock.js'
import type { KvCache } from './kv-cache.js'
import type { HoldEnd, KvHold, PullRefusal } from './kv-transfer.js'
import type { Sequence } from './sequence.js'
import type { EngineStats } from './stats.js'

export type { HoldEnd, KvHold } from './kv-transfer.js'

interface Entry extends KvHold {
  readonly seq: Sequence
  slots: number[]
  timer: TimerHandle | null
}

export class KvHolds {
  private readonly holds = new Map<string, Entry>()
  private held = 0

  constructor(
    private readonly cache: KvCache,
    private readonly clock: Clock,
    private readonly stats: EngineStats,
  ) {}

  /** Requests whose blocks are held. */
  get size(): number {
    return this.holds.size
  }

  /** Blocks held, in all. */
  get blocks(): number {
    return this.held
  }

  get(id: string): KvHold | undefined {
    return this.holds.get(id)
  }

  /** Takes over `seq`'s blocks (the caller clears its slot list) for `leaseMs` from `t`. */
  add(id: string, seq: Sequence, slots: number[], leaseMs: number, t: number): KvHold {
    if (this.holds.has(id)) throw new Error(`a hold named ${id} exists`)
    const e: Entry = {
      id,
      seq,
      blockIds: slots.slice(),
      tokens: seq.promptTokens,
      heldAt: t,
      state: 'held',
      expiresAt: Infinity,
      slots,
      timer: null,
    }
    this.holds.set(id, e)
    this.held += slots.length
    this.stats.kvHolds++
    this.arm(e, t + leaseMs)
    return e
  }

  /** A decode's heartbeat: the lease runs `leaseMs` from `t` again. False if not held. */
  renew(id: string, t: number, leaseMs: number): boolean {
    const e = this.holds.get(id)
    if (e === undefined) return false
    if (e.state === 'held' && e.expiresAt !== Infinity) this.arm(e, Math.max(e.expiresAt, t + leaseMs))
    return true
  }

  /** A decode has the request and will read or cancel it: no expiry from now. False if not held. */
  keepAlive(id: string): boolean {
    const e = this.holds.get(id)
    if (e === undefined) return false
    this.disarm(e)
    return true
  }

  /** Starts the read of `tokens` tokens: the hold, or why not (then nothing changed). */
  beginRead(id: string, tokens: number): KvHold | PullRefusal {
    const e = this.holds.get(id)
    if (e === undefined) return `no KV blocks are held for request ${id} (expired, already read, or never computed here)`
    if (e.state === 'reading') return `the KV blocks of request ${id} are already being read`
    if (tokens > e.tokens) return `request ${id} holds ${e.tokens} tokens of KV; ${tokens} were asked for`
    this.disarm(e)
    e.state = 'reading'
    return e
  }

  /** Ends a hold (the blocks are unpinned and stay cached). False if it was not held. */
  release(id: string, how: HoldEnd, t: number): boolean {
    const e = this.holds.get(id)
    if (e === undefined) return false
    this.end(e, how, t)
    return true
  }

  /** Ends every hold (the process restarts or closes). */
  clear(t: number): void {
    for (const e of [...this.holds.values()]) this.end(e, 'restart', t)
  }

  private end(e: Entry, how: HoldEnd, t: number): void {
    this.disarm(e)
    this.holds.delete(e.id)
    this.held -= e.slots.length
    this.cache.release(e.slots)
    e.slots.length = 0
    if (how === 'read') this.stats.kvHoldsRead++
    else if (how === 'expired') this.stats.kvHoldsExpired++
    e.seq.listener?.onKvReleased?.(e.seq, how, t)
  }

  private arm(e: Entry, at: number): void {
    this.disarm(e)
    e.expiresAt = at
    e.timer = this.clock.schedule(at, (t) => {
      e.timer = null
      if (this.holds.get(e.id) === e && e.state === 'held') this.end(e, 'expired', t)
    })
  }

  private disarm(e: Entry): void {
    if (e.timer !== null) this.clock.cancel(e.timer)
    e.timer = null
    e.expiresAt = Infinity
  }
}
