// The router's end of one engine's (one data-parallel rank's) KV-event stream: a ZeroMQ
// SUB socket on vLLM's publisher, decoding each batch and handing it, in sequence order, to
// a KvEventTarget (the exact index). The sequence numbers are what make the view exact or
// not, so they decide everything here:
//   - the first batch sets the sequence: the view starts empty (reset 'connect');
//   - last + 1 is applied;
//   - a lower number that is 0, far below, or newer than the last batch applied means the
//     engine restarted (a new process counts from 0): reset 'restart', then follow it
//     (missing its first batches is a gap like any other);
//   - other lower numbers are duplicates (a replay overlapping live batches): dropped;
//   - a jump is a gap: with a replay endpoint the missing batches are asked for over a
//     DEALER socket and applied in order, live batches held meanwhile; what a replay cannot
//     fill is lost: the view is reset and marked stale until resyncMs has passed, so the
//     router distrusts it while it refills.
// A restarted engine can also look like a gap, or even like the next batch, when its new
// sequence has already passed the last number seen before the subscriber reconnected. So a
// replay starts one batch early, at the last one applied: if the engine's copy of it is not
// the one applied (its ts differs), this is a new process, and its batches are asked for
// from 0. After a disconnect the next batch is checked that way even when it follows on;
// without a replay endpoint it cannot be, so the view is reset and marked stale instead.
// No frame, however malformed, throws out of here: bad frames are counted and dropped, and
// logged once, then summed up per interval (LogLimiter).
//
// Bounds, so that no publisher can stall the router or grow its memory without end:
//   - ZeroMQ refuses a frame over maxMessageBytes before reading it (it drops the connection
//     for good: the subscriber notices, counts it, and connects again);
//   - messages are handled in turns of at most maxBatchesPerTurn messages or 1 MiB, and a
//     batch of many blocks is applied in pieces, a turn each: the longest turn is decoding
//     one message of at most the cap;
//   - while a replay or a rebuild is in flight, live messages wait in ZeroMQ's receive queue
//     (receiveHighWaterMark messages; beyond, the publisher drops them, a gap), not in the
//     heap, and are handled in order afterwards;
//   - a replay keeps at most maxReplayBatches answers and maxReplayBytes of payload, decoded
//     only when applied; one that fails (times out, overflows, drops) declares its gap lost
//     at once, and the replay endpoint is not asked again for a backoff (1 s, doubling to 60 s).
import { turn, type Pending } from './replay-fetch.js'
import { splitBatch } from './split-batch.js'
import { KvEventConnection } from './subscriber-connection.js'
import { BYTES_PER_TURN, DEFAULT_MAX_PER_TURN, DEFAULT_REPLAY_BACKOFF_MS, DEFAULT_RESYNC_MS, MAX_REPLAY_BACKOFF_MS } from './subscriber-options.js'
import type { KvEventSubscriberOptions, KvEventSubscriberStatus } from './subscriber-options.js'

export { DEFAULT_MAX_MESSAGE_BYTES, DEFAULT_MAX_REPLAY_BATCHES, DEFAULT_MAX_REPLAY_BYTES, type KvEventLogger, type KvEventSubscriberOptions, type KvEventSubscriberStatus, type KvEventTarget } from './subscriber-options.js'

/** A batch naming more blocks is applied in pieces of this many, a turn each (2-8 ms on 2 shared cores). */
const BLOCKS_PER_TURN = 4_096
/** A sequence number this far below the last is a restarted engine, not a late duplicate. */
const RESTART_DISTANCE = 1024n

export class KvEventSubscriber extends KvEventConnection {
  private last: bigint | null = null
  /** ts of the last batch applied; NaN when that one could not be decoded (nothing to compare). */
  private lastTs = NaN
  /** The connection dropped after a batch was seen (batches still queued from it are not suspect until it is back). */
  private dropped = false
  /** It dropped and came back: the engine may have restarted, so the next batch is checked. */
  private suspect = false
  private isStale = false
  private staleTimer: NodeJS.Timeout | undefined
  /**
   * The rebuild from the replay buffer: 'due' until one is tried, 'running', 'done' once it
   * applied something or failed (a buffer that answered empty leaves it due: the engine
   * has published nothing yet, so the first batch tries again).
   */
  private rebuild: 'due' | 'running' | 'done'
  private rebuiltFrom: bigint | null = null
  /** Live batches up to this one were applied by the rebuild: dropped quietly, not counted as duplicates. */
  private quietTo: bigint | null = null
  /** After a failed replay: the endpoint is not asked before this Date.now(); the current backoff. */
  private backoffUntil = 0
  private backoffMs = 0
  private lastBatchAt: number | null = null

  constructor(o: KvEventSubscriberOptions) {
    super(o)
    this.rebuild = o.replayEndpoint === undefined ? 'done' : 'due'
  }

  protected connectedAgain(): void {
    if (this.dropped) this.suspect = true
    this.dropped = false
    // Joining: what the engine cached before is in its replay buffer, not in the live
    // stream. Asked now, not at the first batch, so that a quiet engine's view is whole too.
    if (this.last === null && this.rebuild === 'due' && this.busy === null) this.startRebuild()
  }

  protected disconnected(): void {
    if (this.last !== null) this.dropped = true
  }

  protected closing(): void {
    clearTimeout(this.staleTimer)
  }

  status(): KvEventSubscriberStatus {
    return {
      endpoint: this.o.endpoint,
      connected: this.connected && this.reach?.reached === true,
      unreachable: this.reach?.problem ?? null,
      seq: this.last,
      stale: this.isStale,
      ...this.counts,
      rebuiltFrom: this.rebuiltFrom,
      lastBatchAt: this.lastBatchAt,
    }
  }

  /** A later ts than the last batch applied: a new process's batch, not an old one again. */
  private newer(p: Pending): boolean {
    const b = this.decoded(p)
    return b !== null && b.ts > this.lastTs
  }

  /** One batch, live or replayed, through the sequence rules. */
  protected async handle(p: Pending): Promise<void> {
    if (this.quietTo !== null) {
      if (p.seq <= this.quietTo && !this.newer(p)) return
      this.quietTo = null
    }
    const last = this.last
    if (last === null) {
      if (this.rebuild === 'due') {
        await this.runRebuild(true)
        if (this.closed) return
        return this.handle(p)
      }
      this.reset('connect')
      return this.apply(p)
    }
    // After a reconnect even the next number may come from a new process that got that far.
    const suspect = this.suspect && last >= 0n
    this.suspect = false
    if (p.seq === last + 1n && !suspect) return this.apply(p)
    if (p.seq <= last) {
      const restarted = p.seq === 0n || p.seq < last - RESTART_DISTANCE || this.newer(p)
      if (!restarted) {
        this.counts.duplicates++
        return
      }
      this.counts.restarts++
      this.limiter.note('restart', 'info', `kv events: ${this.o.instance} restarted (sequence ${last} -> ${p.seq})`, { instance: this.o.instance })
      this.reset('restart')
      this.rebuiltFrom = null
      this.last = -1n // the new process's batches from 0 on are owed
      this.lastTs = NaN
      return this.handle(p)
    }
    if (p.seq > last + 1n) this.counts.gaps++
    const from = last + 1n
    const noReplay = this.noReplay()
    if (noReplay !== null) {
      // Without a replay nothing tells a reconnect to the same process from a new one.
      if (p.seq === from) this.lose(from, null, `reconnected, and ${noReplay} a restarted engine cannot be ruled out`)
      else this.lose(from, p.seq - 1n, noReplay)
      return this.apply(p)
    }
    await this.replay(from, p)
  }

  /** Why the replay endpoint is not to be asked (null: it is). */
  private noReplay(): string | null {
    if (this.o.replayEndpoint === undefined) return 'without a replay endpoint'
    const left = this.backoffUntil - Date.now()
    if (left > 0) return `with the replay endpoint not asked for ${left} ms more after a failed replay,`
    return null
  }

  /** Applies a batch; a large one in pieces, a turn of the event loop each (so it resolves later). */
  private async apply(p: Pending): Promise<void> {
    this.last = p.seq
    const b = this.decoded(p)
    this.lastTs = b === null ? NaN : b.ts
    if (b === null) {
      this.lose(p.seq, p.seq, 'undecodable batch')
      return
    }
    this.counts.batches++
    this.counts.events += b.events.length
    this.counts.skippedEvents += b.skipped
    this.counts.badEvents += b.undecodable
    if (b.undecodable > 0) {
      this.limiter.note('malformed', 'warn', `kv events: ${this.o.instance} batch ${p.seq} had ${b.undecodable} malformed events (left out)`, { instance: this.o.instance })
    }
    this.lastBatchAt = Date.now()
    const pieces = splitBatch(b, BLOCKS_PER_TURN)
    for (let i = 0; i < pieces.length; i++) {
      // A batch in pieces was decoded in this turn: its first piece goes in the next.
      if (pieces.length > 1 || i > 0) {
        await turn()
        if (this.closed) return
      }
      try {
        this.o.target.batch(this.o.instance, pieces[i]!, p.seq)
      } catch (err) {
        this.log('error', `kv events: ${this.o.instance} target failed on batch ${p.seq}: ${(err as Error).message}`)
      }
    }
  }

  /**
   * Batches [from, to] will never be seen (to null: an unknown number of them, maybe none):
   * the view starts over and is distrusted for resyncMs.
   */
  private lose(from: bigint, to: bigint | null, why: string): void {
    this.counts.lost++
    const range = to === null ? `from ${from} on, maybe` : from === to ? `${from}` : `${from}..${to}`
    const what = to === from ? 'batch' : 'batches'
    this.limiter.note('lost', 'warn', `kv events: ${this.o.instance} lost ${what} ${range} (${why}); its cache view restarts and is stale for ${this.resyncMs} ms`, {
      instance: this.o.instance,
      from: from.toString(),
      to: to === null ? null : to.toString(),
    })
    this.reset('gap')
    this.rebuiltFrom = null
    // Already stale: the resync starts over, without a new warning for each loss in a row.
    if (!this.isStale) this.setStale(true, `lost batches ${range}`)
    clearTimeout(this.staleTimer)
    this.staleTimer = setTimeout(() => {
      if (!this.closed) this.setStale(false, 'resynced')
    }, this.resyncMs)
    this.staleTimer.unref()
  }

  private get resyncMs(): number {
    return this.o.resyncMs ?? DEFAULT_RESYNC_MS
  }

  private setStale(stale: boolean, why: string): void {
    this.isStale = stale
    this.call(() => this.o.target.stale(this.o.instance, stale, why))
  }

  private reset(why: 'restart' | 'gap' | 'connect'): void {
    this.call(() => this.o.target.reset(this.o.instance, why))
  }

  private call(fn: () => void): void {
    try {
      fn()
    } catch (err) {
      this.log('error', `kv events: ${this.o.instance} target failed: ${(err as Error).message}`)
    }
  }

  /** A replay's outcome: a failed one sets the endpoint's backoff (doubling), an answered one clears it. */
  private replayed(answered: boolean): void {
    if (answered) {
      this.backoffMs = 0
      return
    }
    this.counts.replayFailures++
    const initial = this.o.replayBackoffMs ?? DEFAULT_REPLAY_BACKOFF_MS
    this.backoffMs = this.backoffMs === 0 ? initial : Math.min(this.backoffMs * 2, Math.max(initial, MAX_REPLAY_BACKOFF_MS))
    this.backoffUntil = Date.now() + this.backoffMs
  }

  /**
   * Asks the replay socket for batches from `from` on (and the last one applied, to check
   * the engine is the same process), applies what fills the gap before `p` (the live batch
   * that showed it), then `p`.
   */
  private async replay(from: bigint, p: Pending): Promise<void> {
    const anchorSeq = from - 1n
    let r = await this.fetchReplay(anchorSeq >= 0n && !Number.isNaN(this.lastTs) ? anchorSeq : from)
    if (this.closed) return
    const anchor = r.batches.find((x) => x.seq === anchorSeq)
    if (anchor !== undefined && this.decoded(anchor) !== null && anchor.batch!.ts !== this.lastTs) {
      // The engine's batch `anchorSeq` is not the one applied: a new process.
      this.counts.restarts++
      this.limiter.note('restart', 'info', `kv events: ${this.o.instance} restarted (its batch ${anchorSeq} is not the one applied)`, { instance: this.o.instance })
      this.reset('restart')
      this.rebuiltFrom = null
      this.last = -1n
      this.lastTs = NaN
      r = await this.fetchReplay(0n)
      if (this.closed) return
    }
    this.replayed(r.answered)
    const got = r.batches
    const firstHeld = p.seq
    let lostAny = false
    let applied = 0
    const perTurn = this.o.maxBatchesPerTurn ?? DEFAULT_MAX_PER_TURN
    let bytes = 0
    for (const x of got) {
      if (x.seq <= this.last!) continue
      if (x.seq >= firstHeld) break // live from here on
      if (x.seq !== this.last! + 1n) {
        // The replay starts past the gap (its buffer no longer reaches back): what it has
        // still seeds the view after the reset.
        this.lose(this.last! + 1n, x.seq - 1n, `the replay started at ${x.seq}`)
        lostAny = true
      }
      bytes += x.payload?.length ?? 0
      await this.apply(x)
      if (this.closed) return
      applied++
      if (applied % perTurn === 0 || bytes >= BYTES_PER_TURN) {
        bytes = 0
        await turn()
        if (this.closed) return
      }
    }
    if (this.last! + 1n < firstHeld) {
      const why = !r.answered
        ? `the replay failed: ${r.failure}; the replay endpoint is not asked again for ${this.backoffMs} ms`
        : got.length === 0
          ? 'the replay returned nothing'
          : `the replay held only ${got[0]!.seq}..${got.at(-1)!.seq}`
      this.lose(this.last! + 1n, firstHeld - 1n, why)
      lostAny = true
      this.last = firstHeld - 1n
    }
    if (!lostAny && applied > 0) this.counts.replays++
    // Through the rules again: a duplicate of the replay drops; a restart or a new gap is handled as such.
    return this.handle(p)
  }

  private startRebuild(): void {
    void this.runRebuild(false)
  }

  /** withLive: a live batch is waiting for it (so an empty buffer is not asked again). */
  private runRebuild(withLive: boolean): Promise<void> {
    this.rebuild = 'running'
    const b = this.rebuildFromBuffer(withLive).finally(() => {
      if (this.busy === b) this.busy = null
    })
    this.busy = b
    return b
  }

  /**
   * Joining the stream: everything the engine's replay buffer holds, from 0, applied in
   * order (in bounded turns; live batches wait meanwhile), then the live ones through the
   * rules. What is applied is the last unbroken run of decodable batches: a hole in the
   * buffer would leave the view wrong, not just short.
   */
  private async rebuildFromBuffer(withLive: boolean): Promise<void> {
    const { batches, answered } = await this.fetchReplay(0n)
    if (this.closed) return
    this.replayed(answered)
    let start = -1
    let bytes = 0
    for (let i = 0; i < batches.length; i++) {
      const b = batches[i]!
      // Decoding all of it at once could take seconds (64 MiB): in turns of 1 MiB.
      bytes += b.payload?.length ?? 0
      if (bytes >= BYTES_PER_TURN) {
        bytes = 0
        await turn()
        if (this.closed) return
      }
      if (this.decoded(b) === null) start = -1
      else if (start < 0 || b.seq !== batches[i - 1]!.seq + 1n) start = i
    }
    const run = start < 0 ? [] : batches.slice(start)
    if (run.length === 0) {
      // Nothing to rebuild from: follow live as before. An empty buffer that answered, asked
      // before any batch came, is an engine that has published nothing yet: its first batch
      // tries again (once: a buffer empty even then is not asked again).
      this.rebuild = answered && batches.length === 0 && !withLive ? 'due' : 'done'
      if (answered && batches.length > 0) this.log('warn', `kv events: ${this.o.instance} replay buffer had no usable run of batches; following live`, { instance: this.o.instance })
      return
    }
    this.rebuild = 'done'
    const from = run[0]!.seq
    const to = run.at(-1)!.seq
    this.reset('connect')
    this.call(() => this.o.target.rebuilding?.(this.o.instance, from))
    const perTurn = this.o.maxBatchesPerTurn ?? DEFAULT_MAX_PER_TURN
    let events = 0
    for (let i = 0; i < run.length; i++) {
      if (i > 0 && i % perTurn === 0) {
        await turn()
        if (this.closed) return
      }
      await this.apply(run[i]!)
      if (this.closed) return
      events += run[i]!.batch?.events.length ?? 0
    }
    this.rebuiltFrom = from
    this.quietTo = to
    this.counts.rebuilds++
    if (from > 0n) this.counts.partialRebuilds++
    this.log(
      'info',
      from === 0n
        ? `kv events: ${this.o.instance} view rebuilt from the replay buffer: batches 0..${to} (${events} events), the whole cache`
        : `kv events: ${this.o.instance} view rebuilt from the replay buffer: batches ${from}..${to} (${events} events); the buffer no longer reaches back to 0, so blocks stored before batch ${from} are unknown`,
      { instance: this.o.instance, rebuiltFrom: from.toString(), to: to.toString(), complete: from === 0n },
    )
    this.call(() => this.o.target.rebuilt?.(this.o.instance, from, to))
  }

}
