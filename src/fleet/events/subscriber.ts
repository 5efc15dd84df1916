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
// No frame, however malformed, throws out of here: bad frames are counted and dropped.
import { createRequire } from 'node:module'
import type { Dealer, Subscriber } from 'zeromq'
import { requireFeature } from '../../core/optional-packages.js'
import { decodeBatch, KvEventDecodeError, type DecodedBatch } from './codec.js'
import { END_OF_REPLAY, readSeq, seqFrame } from './frames.js'
import { DEFAULT_CONNECT_WARN_MS, PublisherReach } from './publisher-reach.js'
import type { KvEventBatch } from './types.js'

type ZeroMq = typeof import('zeromq')
let zmq: ZeroMq | undefined

/**
 * ZeroMQ (an optional package), loaded when the first socket opens. Its CommonJS build is
 * required rather than imported because start() is synchronous, as the view's sync() is.
 */
function zeromq(): ZeroMq {
  if (zmq === undefined) {
    requireFeature('kvEvents')
    zmq = createRequire(import.meta.url)('zeromq') as ZeroMq
  }
  return zmq
}

export interface KvEventTarget {
  /** A batch, in sequence order, each applied once. */
  batch(instance: string, batch: KvEventBatch, seq: bigint): void
  /** The view must start over (empty): the engine restarted, events were lost, or this is the first batch seen. */
  reset(instance: string, why: 'restart' | 'gap' | 'connect'): void
  /** The view is (or no longer is) to be distrusted: it is refilling after lost events. */
  stale(instance: string, stale: boolean, why: string): void
  /**
   * The view, just reset ('connect'), is being rebuilt from the replay buffer: the batches
   * from `from` on follow, then rebuilt(). Until then it is half-built.
   */
  rebuilding?(instance: string, from: bigint): void
  /** The rebuild is applied: the view holds what batches `from`..`to` stored (complete when from is 0). */
  rebuilt?(instance: string, from: bigint, to: bigint): void
}

export type KvEventLogger = (level: 'info' | 'warn' | 'error', msg: string, fields?: object) => void

export interface KvEventSubscriberOptions {
  instance: string
  /** The engine's PUB endpoint, tcp://host:port. */
  endpoint: string
  /** Its ROUTER replay endpoint, if it has one. */
  replayEndpoint?: string
  /** Topic prefix to subscribe to (default '': everything). */
  topic?: string
  target: KvEventTarget
  log?: KvEventLogger
  /** How long an instance stays stale after an unrecoverable gap (default 30000 ms). */
  resyncMs?: number
  /** Yield to the event loop after this many messages in a row (default 256): a flooding publisher must not starve requests. */
  maxBatchesPerTurn?: number
  /** How long a replay may take before the gap counts as lost (default 2000 ms). */
  replayTimeoutMs?: number
  /** Not reached (no ZeroMQ handshake) this long after start or a disconnect: one warning naming the endpoint (default 5000 ms). */
  connectWarnMs?: number
}

export interface KvEventSubscriberStatus {
  endpoint: string
  /** The SUB socket has a connection to the publisher, its ZeroMQ handshake done (from ZeroMQ's socket events). */
  connected: boolean
  /** Why the publisher is not reached, once connectWarnMs have passed without it; null otherwise. */
  unreachable: string | null
  /** Sequence number of the last batch applied (or lost), null before the first. */
  seq: bigint | null
  stale: boolean
  /** Batches and events applied. */
  batches: number
  events: number
  /** Messages dropped as unusable: wrong frame count, a sequence frame not 8 bytes, a payload that is not a batch. */
  undecodable: number
  /** Events inside applied batches left out: unknown types (skipped) and malformed ones (badEvents). */
  skippedEvents: number
  badEvents: number
  /** Sequence jumps seen; of those, filled by a replay; and lost (the view was reset). */
  gaps: number
  replays: number
  lost: number
  duplicates: number
  restarts: number
  /** Views rebuilt from the replay buffer on joining the stream, and of those, partial ones (the buffer no longer reached back to 0). */
  rebuilds: number
  partialRebuilds: number
  /** The sequence the current view was rebuilt from (0: complete); null when it was not rebuilt (followed live, or started over since). */
  rebuiltFrom: bigint | null
  /** Date.now() when the last batch was applied. */
  lastBatchAt: number | null
}

const DEFAULT_RESYNC_MS = 30_000
const DEFAULT_MAX_PER_TURN = 256
const DEFAULT_REPLAY_TIMEOUT_MS = 2_000
/** A sequence number this far below the last is a restarted engine, not a late duplicate. */
const RESTART_DISTANCE = 1024n

interface Pending {
  seq: bigint
  /** null: the payload could not be decoded, so the batch's content is lost. */
  batch: DecodedBatch | null
}

export class KvEventSubscriber {
  private readonly o: KvEventSubscriberOptions
  private sub: Subscriber | null = null
  private dealer: Dealer | null = null
  private closed = false
  private connected = false
  private reach: PublisherReach | undefined
  private last: bigint | null = null
  /** ts of the last batch applied; NaN when that one could not be decoded (nothing to compare). */
  private lastTs = NaN
  /** The connection dropped since the last batch: the engine may have restarted. */
  private suspect = false
  private isStale = false
  private staleTimer: NodeJS.Timeout | undefined
  /** Set while a replay is being fetched: live batches wait here. */
  private held: Pending[] | null = null
  /**
   * The rebuild from the replay buffer: 'due' until one is tried, 'running', 'done' once it
   * applied something or failed (a buffer that answered empty leaves it due: the engine
   * has published nothing yet, so the first batch tries again).
   */
  private rebuild: 'due' | 'running' | 'done'
  private rebuiltFrom: bigint | null = null
  private readonly counts = {
    batches: 0,
    events: 0,
    undecodable: 0,
    skippedEvents: 0,
    badEvents: 0,
    gaps: 0,
    replays: 0,
    lost: 0,
    duplicates: 0,
    restarts: 0,
    rebuilds: 0,
    partialRebuilds: 0,
  }
  private lastBatchAt: number | null = null

  constructor(o: KvEventSubscriberOptions) {
    if (typeof o.instance !== 'string' || o.instance.length === 0) throw new TypeError('instance must be a non-empty string')
    for (const [k, v] of [['endpoint', o.endpoint], ['replayEndpoint', o.replayEndpoint]] as const) {
      if (v !== undefined && !/^tcp:\/\/.+:\d+$/.test(v)) throw new RangeError(`${k} must be tcp://host:port; got ${JSON.stringify(v)}`)
    }
    if (o.endpoint === undefined) throw new RangeError('endpoint must be tcp://host:port; got undefined')
    for (const [k, v] of [['resyncMs', o.resyncMs], ['maxBatchesPerTurn', o.maxBatchesPerTurn], ['replayTimeoutMs', o.replayTimeoutMs]] as const) {
      if (v !== undefined && !(Number.isInteger(v) && v >= 1)) throw new RangeError(`${k} must be a positive integer; got ${JSON.stringify(v)}`)
    }
    this.o = o
    this.rebuild = o.replayEndpoint === undefined ? 'done' : 'due'
  }

  start(): void {
    if (this.sub !== null || this.closed) return
    // vLLM's PUB queues up to 100,000 messages per subscriber; queue as many here so a burst
    // waits in memory rather than being dropped (a gap) while a turn of the event loop runs.
    const sub = new (zeromq().Subscriber)({ linger: 0, receiveHighWaterMark: 100_000, ipv6: /^tcp:\/\/\[/.test(this.o.endpoint) })
    this.sub = sub
    // It logs the connection and its loss, and warns when the publisher is not reached.
    this.reach = new PublisherReach(sub.events, this.o.instance, this.o.endpoint, this.o.connectWarnMs ?? DEFAULT_CONNECT_WARN_MS, {
      warn: (msg, fields) => this.log('warn', msg, fields),
      info: (msg, fields) => this.log('info', msg, fields),
    })
    sub.events.on('connect', () => {
      this.connected = true
      // Joining: what the engine cached before is in its replay buffer, not in the live
      // stream. Asked now, not at the first batch, so that a quiet engine's view is whole too.
      if (this.last === null && this.rebuild === 'due' && this.held === null) this.startRebuild([])
    })
    sub.events.on('disconnect', () => {
      this.connected = false
      if (this.last !== null) this.suspect = true
    })
    sub.connect(this.o.endpoint) // ZeroMQ reconnects by itself while the engine is down
    sub.subscribe(this.o.topic ?? '')
    void this.receiveLoop(sub)
  }

  async close(): Promise<void> {
    if (this.closed) return
    this.closed = true
    clearTimeout(this.staleTimer)
    this.reach?.stop()
    this.sub?.close()
    this.dealer?.close()
    this.connected = false
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

  private async receiveLoop(sub: Subscriber): Promise<void> {
    const perTurn = this.o.maxBatchesPerTurn ?? DEFAULT_MAX_PER_TURN
    let inTurn = 0
    while (!this.closed) {
      let msg: Buffer[]
      try {
        msg = await sub.receive()
      } catch (err) {
        if (this.closed) return
        this.log('error', `kv events: ${this.o.instance} receive failed: ${(err as Error).message}`)
        await new Promise((r) => setTimeout(r, 100))
        continue
      }
      this.onMessage(msg)
      // receive() resolves at once while messages are queued, on the microtask queue:
      // without a macrotask break a flood would starve every request.
      if (++inTurn >= perTurn) {
        inTurn = 0
        await new Promise((r) => setImmediate(r))
      }
    }
  }

  private onMessage(msg: Buffer[]): void {
    if (msg.length !== 3) {
      this.bad(`a message of ${msg.length} frames (expected topic, seq, payload)`)
      return
    }
    const seq = readSeq(msg[1]!)
    if (seq === null || seq < 0n) {
      this.bad(`a sequence frame of ${msg[1]!.length} bytes (expected 8)`)
      return
    }
    this.handle({ seq, batch: this.decode(msg[2]!, seq) })
  }

  private decode(payload: Uint8Array, seq: bigint): DecodedBatch | null {
    try {
      return decodeBatch(payload)
    } catch (err) {
      const code = err instanceof KvEventDecodeError ? err.code : 'error'
      this.bad(`batch ${seq} undecodable (${code}): ${(err as Error).message}`)
      return null
    }
  }

  private bad(what: string): void {
    this.counts.undecodable++
    this.log('warn', `kv events: ${this.o.instance} dropped ${what}`, { instance: this.o.instance })
  }

  /** One batch, live or replayed, through the sequence rules. */
  private handle(p: Pending): void {
    if (this.held !== null) {
      this.held.push(p)
      return
    }
    const last = this.last
    if (last === null) {
      if (this.rebuild === 'due') {
        this.startRebuild([p])
        return
      }
      this.reset('connect')
      this.apply(p)
      return
    }
    // After a disconnect even the next number may come from a new process that got that far.
    const suspect = this.suspect && last >= 0n
    this.suspect = false
    if (p.seq === last + 1n && !suspect) {
      this.apply(p)
      return
    }
    if (p.seq <= last) {
      const restarted = p.seq === 0n || p.seq < last - RESTART_DISTANCE || (p.batch !== null && p.batch.ts > this.lastTs)
      if (!restarted) {
        this.counts.duplicates++
        return
      }
      this.counts.restarts++
      this.log('info', `kv events: ${this.o.instance} restarted (sequence ${last} -> ${p.seq})`, { instance: this.o.instance })
      this.reset('restart')
      this.rebuiltFrom = null
      this.last = -1n // the new process's batches from 0 on are owed
      this.lastTs = NaN
      this.handle(p)
      return
    }
    if (p.seq > last + 1n) this.counts.gaps++
    const from = last + 1n
    if (this.o.replayEndpoint === undefined) {
      // Without a replay nothing tells a reconnect to the same process from a new one.
      if (p.seq === from) this.lose(from, null, 'reconnected, and without a replay endpoint a restarted engine cannot be ruled out')
      else this.lose(from, p.seq - 1n, 'no replay endpoint')
      this.apply(p)
      return
    }
    this.held = [p]
    void this.replay(from)
  }

  private apply(p: Pending): void {
    this.last = p.seq
    const b = p.batch
    this.lastTs = b === null ? NaN : b.ts
    if (b === null) {
      this.lose(p.seq, p.seq, 'undecodable batch')
      return
    }
    this.counts.batches++
    this.counts.events += b.events.length
    this.counts.skippedEvents += b.skipped
    this.counts.badEvents += b.undecodable
    this.lastBatchAt = Date.now()
    try {
      this.o.target.batch(this.o.instance, b, p.seq)
    } catch (err) {
      this.log('error', `kv events: ${this.o.instance} target failed on batch ${p.seq}: ${(err as Error).message}`)
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
    this.log('warn', `kv events: ${this.o.instance} lost ${what} ${range} (${why}); its cache view restarts and is stale for ${this.resyncMs} ms`, {
      instance: this.o.instance,
      from: from.toString(),
      to: to === null ? null : to.toString(),
    })
    this.reset('gap')
    this.rebuiltFrom = null
    this.setStale(true, `lost batches ${range}`)
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

  /**
   * Asks the replay socket for batches from `from` on (and the last one applied, to check
   * the engine is the same process), applies what fills the gap, then the held live ones.
   */
  private async replay(from: bigint): Promise<void> {
    const anchorSeq = from - 1n
    let got = (await this.fetchReplay(anchorSeq >= 0n && !Number.isNaN(this.lastTs) ? anchorSeq : from)).batches
    if (this.closed) return
    const anchor = got.find((r) => r.seq === anchorSeq)
    if (anchor?.batch != null && anchor.batch.ts !== this.lastTs) {
      // The engine's batch `anchorSeq` is not the one applied: a new process.
      this.counts.restarts++
      this.log('info', `kv events: ${this.o.instance} restarted (its batch ${anchorSeq} is not the one applied)`, { instance: this.o.instance })
      this.reset('restart')
      this.rebuiltFrom = null
      this.last = -1n
      this.lastTs = NaN
      got = (await this.fetchReplay(0n)).batches
      if (this.closed) return
    }
    const held = this.held ?? []
    this.held = null
    const firstHeld = held[0]!.seq
    let lostAny = false
    let applied = 0
    for (const r of got) {
      if (r.seq <= this.last!) continue
      if (r.seq >= firstHeld) break // live from here on
      if (r.seq !== this.last! + 1n) {
        // The replay starts past the gap (its buffer no longer reaches back): what it has
        // still seeds the view after the reset.
        this.lose(this.last! + 1n, r.seq - 1n, `the replay started at ${r.seq}`)
        lostAny = true
      }
      this.apply(r)
      applied++
    }
    if (this.last! + 1n < firstHeld) {
      this.lose(this.last! + 1n, firstHeld - 1n, got.length === 0 ? 'the replay returned nothing' : `the replay held only ${got[0]!.seq}..${got.at(-1)!.seq}`)
      lostAny = true
      this.last = firstHeld - 1n
    }
    if (!lostAny && applied > 0) this.counts.replays++
    // Through the rules again: duplicates of the replay drop, a new gap starts a new replay
    // (and the rest is held for it).
    for (const p of held) this.handle(p)
  }

  private startRebuild(held: Pending[]): void {
    this.rebuild = 'running'
    this.held = held
    void this.rebuildFromBuffer()
  }

  /**
   * Joining the stream: everything the engine's replay buffer holds, from 0, applied in
   * order (in bounded turns; live batches held meanwhile), then the held ones through the
   * rules. What is applied is the last unbroken run of decodable batches: a hole in the
   * buffer would leave the view wrong, not just short.
   */
  private async rebuildFromBuffer(): Promise<void> {
    const { batches, answered } = await this.fetchReplay(0n)
    if (this.closed) return
    let start = -1
    for (let i = 0; i < batches.length; i++) {
      const b = batches[i]!
      if (b.batch === null) start = -1
      else if (start < 0 || b.seq !== batches[i - 1]!.seq + 1n) start = i
    }
    const run = start < 0 ? [] : batches.slice(start)
    if (run.length === 0) {
      // Nothing to rebuild from: follow live as before. An empty buffer that answered, asked
      // before any batch came, is an engine that has published nothing yet: its first batch
      // tries again (once: a buffer empty even then is not asked again).
      this.rebuild = answered && batches.length === 0 && (this.held?.length ?? 0) === 0 ? 'due' : 'done'
      if (answered && batches.length > 0) this.log('warn', `kv events: ${this.o.instance} replay buffer had no usable run of batches; following live`, { instance: this.o.instance })
      this.releaseHeld()
      return
    }
    this.rebuild = 'done'
    const from = run[0]!.seq
    const to = run.at(-1)!.seq
    this.reset('connect')
    this.call(() => this.o.target.rebuilding?.(this.o.instance, from))
    const perTurn = this.o.maxBatchesPerTurn ?? DEFAULT_MAX_PER_TURN
    for (let i = 0; i < run.length; i++) {
      if (i > 0 && i % perTurn === 0) {
        await new Promise((r) => setImmediate(r))
        if (this.closed) return
      }
      this.apply(run[i]!)
    }
    this.rebuiltFrom = from
    this.counts.rebuilds++
    if (from > 0n) this.counts.partialRebuilds++
    const events = run.reduce((n, r) => n + r.batch!.events.length, 0)
    this.log(
      'info',
      from === 0n
        ? `kv events: ${this.o.instance} view rebuilt from the replay buffer: batches 0..${to} (${events} events), the whole cache`
        : `kv events: ${this.o.instance} view rebuilt from the replay buffer: batches ${from}..${to} (${events} events); the buffer no longer reaches back to 0, so blocks stored before batch ${from} are unknown`,
      { instance: this.o.instance, rebuiltFrom: from.toString(), to: to.toString(), complete: from === 0n },
    )
    this.call(() => this.o.target.rebuilt?.(this.o.instance, from, to))
    this.releaseHeld()
  }

  /**
   * The live batches held during a rebuild, through the rules. Those the replay already
   * applied are dropped quietly (not counted as duplicates): no later ts, so no new process.
   */
  private releaseHeld(): void {
    const held = this.held ?? []
    this.held = null
    for (const p of held) {
      if (this.rebuiltFrom !== null && this.last !== null && p.seq <= this.last && (p.batch === null || !(p.batch.ts > this.lastTs))) continue
      this.handle(p)
    }
  }

  /** The batches replayed from `from` on, in order; answered: the end marker came (else it failed or timed out). */
  private async fetchReplay(from: bigint): Promise<{ batches: Pending[]; answered: boolean }> {
    const timeout = this.o.replayTimeoutMs ?? DEFAULT_REPLAY_TIMEOUT_MS
    const deadline = Date.now() + timeout
    const out: Pending[] = []
    let answered = false
    const dealer = new (zeromq().Dealer)({ linger: 0, ipv6: /^tcp:\/\/\[/.test(this.o.replayEndpoint!) })
    this.dealer = dealer
    try {
      dealer.connect(this.o.replayEndpoint!)
      dealer.sendTimeout = timeout
      await dealer.send(['', seqFrame(from)])
      for (;;) {
        const left = deadline - Date.now()
        if (left <= 0) throw new Error(`no end of replay within ${timeout} ms`)
        dealer.receiveTimeout = left
        const msg = await dealer.receive()
        if (msg.length !== 3 || msg[0]!.length !== 0) {
          this.bad(`a replay message of ${msg.length} frames`)
          continue
        }
        const seq = readSeq(msg[1]!)
        if (seq === null) {
          this.bad(`a replay sequence frame of ${msg[1]!.length} bytes`)
          continue
        }
        if (seq === END_OF_REPLAY) {
          answered = true
          break
        }
        out.push({ seq, batch: this.decode(msg[2]!, seq) })
      }
    } catch (err) {
      if (!this.closed) this.log('warn', `kv events: ${this.o.instance} replay from ${from} failed: ${(err as Error).message}`)
    } finally {
      dealer.close()
      if (this.dealer === dealer) this.dealer = null
    }
    out.sort((a, b) => (a.seq < b.seq ? -1 : a.seq > b.seq ? 1 : 0))
    return { batches: out, answered }
  }

  private log(level: 'info' | 'warn' | 'error', msg: string, fields?: object): void {
    this.o.log?.(level, msg, fields)
  }
}
