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
import { createRequire } from 'node:module'
import type { Dealer, Subscriber } from 'zeromq'
import { requireFeature } from '../../core/optional-packages.js'
import { decodeBatch, KvEventDecodeError, type DecodedBatch } from './codec.js'
import { readReplayAnswer, readSeq, SEQ_BYTES, seqFrame } from './frames.js'
import { LogLimiter } from './log-limiter.js'
import { DEFAULT_CONNECT_WARN_MS, PublisherReach } from './publisher-reach.js'
import { splitBatch } from './split-batch.js'
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
  /** The largest message ZeroMQ accepts, per frame (default 1 MiB); a larger one is refused unread. */
  maxMessageBytes?: number
  /** Answers one replay may send before it counts as failed (default 20,000 batches, 64 MiB of payload). */
  maxReplayBatches?: number
  maxReplayBytes?: number
  /** After a failed replay the endpoint is not asked again for this long, doubling per failure up to 60 s (default 1000 ms). */
  replayBackoffMs?: number
  /** Repeated warnings of one kind are summed up once per this interval (default 10000 ms). */
  logIntervalMs?: number
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
  /** Messages dropped as unusable: wrong frame count, a sequence frame not 8 bytes or negative, a payload that is not a batch. */
  undecodable: number
  /** Connections ZeroMQ dropped for a protocol violation, in practice a message over maxMessageBytes (each such message is lost). */
  oversized: number
  /** Replays that failed (timed out, overflowed the bounds, lost their connection): their gaps were lost. */
  replayFailures: number
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
export const DEFAULT_MAX_MESSAGE_BYTES = 1024 * 1024
export const DEFAULT_MAX_REPLAY_BATCHES = 20_000
export const DEFAULT_MAX_REPLAY_BYTES = 64 * 1024 * 1024
const DEFAULT_REPLAY_BACKOFF_MS = 1_000
const MAX_REPLAY_BACKOFF_MS = 60_000
/** A turn of the event loop handles at most this much payload (and at least one message). */
const BYTES_PER_TURN = 1024 * 1024
/** A batch naming more blocks is applied in pieces of this many, a turn each (2-8 ms on 2 shared cores). */
const BLOCKS_PER_TURN = 4_096
/** ZeroMQ schedules a reconnect at once after an ordinary disconnect; none within this long means it gave the connection up. */
const RETRY_WATCH_MS = 1_000
/** A sequence number this far below the last is a restarted engine, not a late duplicate. */
const RESTART_DISTANCE = 1024n

interface Pending {
  seq: bigint
  /** The payload until it is decoded (a replay's answers wait undecoded: they are smaller so). */
  payload: Uint8Array | null
  /** undefined: not decoded yet; null: the payload could not be decoded, so the batch's content is lost. */
  batch: DecodedBatch | null | undefined
}

const turn = (): Promise<void> => new Promise((r) => setImmediate(r))

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
  /** The connection dropped after a batch was seen (batches still queued from it are not suspect until it is back). */
  private dropped = false
  /** It dropped and came back: the engine may have restarted, so the next batch is checked. */
  private suspect = false
  private isStale = false
  private staleTimer: NodeJS.Timeout | undefined
  /** Watches for ZeroMQ's reconnect after a disconnect (none: it gave the connection up). */
  private retryWatch: NodeJS.Timeout | undefined
  /** A rebuild in flight (asked at the connect): messages wait for it. */
  private busy: Promise<void> | null = null
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
  private readonly limiter: LogLimiter
  private readonly counts = {
    batches: 0,
    events: 0,
    undecodable: 0,
    oversized: 0,
    skippedEvents: 0,
    badEvents: 0,
    gaps: 0,
    replays: 0,
    replayFailures: 0,
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
    for (const [k, v] of [
      ['resyncMs', o.resyncMs],
      ['maxBatchesPerTurn', o.maxBatchesPerTurn],
      ['replayTimeoutMs', o.replayTimeoutMs],
      ['maxMessageBytes', o.maxMessageBytes],
      ['maxReplayBatches', o.maxReplayBatches],
      ['maxReplayBytes', o.maxReplayBytes],
      ['replayBackoffMs', o.replayBackoffMs],
      ['logIntervalMs', o.logIntervalMs],
    ] as const) {
      if (v !== undefined && !(Number.isInteger(v) && v >= 1)) throw new RangeError(`${k} must be a positive integer; got ${JSON.stringify(v)}`)
    }
    // ZeroMQ takes the cap as a signed 64-bit count; beyond 2^31 it is no bound worth having.
    if (o.maxMessageBytes !== undefined && o.maxMessageBytes > 2 ** 31 - 1) throw new RangeError(`maxMessageBytes must be at most ${2 ** 31 - 1}; got ${o.maxMessageBytes}`)
    this.o = o
    this.rebuild = o.replayEndpoint === undefined ? 'done' : 'due'
    this.limiter = new LogLimiter((level, msg, fields) => this.log(level, msg, fields), `${o.instance} (${o.endpoint})`, o.logIntervalMs)
  }

  private get maxMessageBytes(): number {
    return this.o.maxMessageBytes ?? DEFAULT_MAX_MESSAGE_BYTES
  }

  start(): void {
    if (this.sub !== null || this.closed) return
    // vLLM's PUB queues up to 100,000 messages per subscriber; queue as many here so a burst
    // waits in memory rather than being dropped (a gap) while a turn of the event loop runs.
    // Each is at most maxMessageBytes: ZeroMQ reads a frame's size first and refuses a larger
    // one without reading it.
    const sub = new (zeromq().Subscriber)({
      linger: 0,
      receiveHighWaterMark: 100_000,
      maxMessageSize: this.maxMessageBytes,
      ipv6: /^tcp:\/\/\[/.test(this.o.endpoint),
    })
    this.sub = sub
    // It logs the connection and its loss, and warns when the publisher is not reached.
    this.reach = new PublisherReach(sub.events, this.o.instance, this.o.endpoint, this.o.connectWarnMs ?? DEFAULT_CONNECT_WARN_MS, {
      // Through the limiter: a publisher that keeps breaking its connection must not flood the log.
      warn: (kind, msg, fields) => this.limiter.note(kind, 'warn', msg, fields),
      info: (kind, msg, fields) => this.limiter.note(kind, 'info', msg, fields),
    })
    sub.events.on('connect', () => {
      this.connected = true
      if (this.dropped) this.suspect = true
      this.dropped = false
      // Joining: what the engine cached before is in its replay buffer, not in the live
      // stream. Asked now, not at the first batch, so that a quiet engine's view is whole too.
      if (this.last === null && this.rebuild === 'due' && this.busy === null) this.startRebuild()
    })
    sub.events.on('disconnect', () => {
      this.connected = false
      if (this.last !== null) this.dropped = true
      clearTimeout(this.retryWatch)
      this.retryWatch = setTimeout(() => this.givenUp(sub), RETRY_WATCH_MS)
      this.retryWatch.unref()
    })
    sub.events.on('connect:retry', () => clearTimeout(this.retryWatch))
    sub.connect(this.o.endpoint) // ZeroMQ reconnects by itself while the engine is down
    sub.subscribe(this.o.topic ?? '')
    void this.receiveLoop(sub)
  }

  /**
   * ZeroMQ dropped the connection and schedules no reconnect: it does that on a protocol
   * error, which from a publisher means a frame over maxMessageBytes (an oversized batch).
   * That batch is lost (a gap, found when the next one comes); the connection is made again.
   */
  private givenUp(sub: Subscriber): void {
    if (this.closed || this.sub !== sub) return
    this.counts.oversized++
    const mib = (this.maxMessageBytes / 1024 / 1024).toFixed(1)
    this.limiter.note(
      'oversized',
      'warn',
      `kv events: ${this.o.instance}: ZeroMQ dropped the connection to ${this.o.endpoint} for a protocol violation, in practice a message over the ${mib} MiB cap (kvEvents.maxMessageBytes); that batch is lost, connecting again`,
      { instance: this.o.instance, maxMessageBytes: this.maxMessageBytes },
    )
    try {
      sub.disconnect(this.o.endpoint)
    } catch {
      // already forgotten by ZeroMQ
    }
    sub.connect(this.o.endpoint)
  }

  async close(): Promise<void> {
    if (this.closed) return
    this.closed = true
    clearTimeout(this.staleTimer)
    this.reach?.stop()
    clearTimeout(this.retryWatch)
    this.limiter.close()
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
    let bytes = 0
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
      while (this.busy !== null) await this.busy
      if (this.closed) return
      const p = this.parse(msg)
      // A replay runs inside: later messages wait in ZeroMQ's queue until it is done.
      if (p !== null) await this.handle(p)
      for (const f of msg) bytes += f.length
      // receive() resolves at once while messages are queued, on the microtask queue:
      // without a macrotask break a flood would starve every request.
      if (++inTurn >= perTurn || bytes >= BYTES_PER_TURN) {
        inTurn = 0
        bytes = 0
        await turn()
      }
    }
  }

  private parse(msg: Buffer[]): Pending | null {
    if (msg.length !== 3) {
      this.bad(`a message of ${msg.length} frames (expected topic, seq, payload)`)
      return null
    }
    const seq = readSeq(msg[1]!)
    if (seq === null) {
      this.bad(`a sequence frame of ${msg[1]!.length} bytes (expected ${SEQ_BYTES})`)
      return null
    }
    if (seq < 0n) {
      this.bad(`a message with the negative sequence number ${seq}`)
      return null
    }
    return { seq, payload: msg[2]!, batch: undefined }
  }

  /** The batch, decoded on first use (its payload then let go). */
  private decoded(p: Pending): DecodedBatch | null {
    if (p.batch === undefined) {
      p.batch = this.decode(p.payload!, p.seq)
      p.payload = null
    }
    return p.batch
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
    this.limiter.note('bad', 'warn', `kv events: ${this.o.instance} dropped ${what}`, { instance: this.o.instance })
  }

  /** A later ts than the last batch applied: a new process's batch, not an old one again. */
  private newer(p: Pending): boolean {
    const b = this.decoded(p)
    return b !== null && b.ts > this.lastTs
  }

  /** One batch, live or replayed, through the sequence rules. */
  private async handle(p: Pending): Promise<void> {
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

  /**
   * The batches replayed from `from` on, in order, undecoded; answered: the end marker came
   * (else the replay failed, and `failure` says how: timed out, overflowed its bounds, or
   * lost its connection; what came before is kept).
   */
  private async fetchReplay(from: bigint): Promise<{ batches: Pending[]; answered: boolean; failure: string }> {
    const timeout = this.o.replayTimeoutMs ?? DEFAULT_REPLAY_TIMEOUT_MS
    const maxBatches = this.o.maxReplayBatches ?? DEFAULT_MAX_REPLAY_BATCHES
    const maxBytes = this.o.maxReplayBytes ?? DEFAULT_MAX_REPLAY_BYTES
    const deadline = Date.now() + timeout
    const out: Pending[] = []
    let answered = false
    let failure = ''
    let bytes = 0
    let inTurn = 0
    let turnBytes = 0
    const perTurn = this.o.maxBatchesPerTurn ?? DEFAULT_MAX_PER_TURN
    const dealer = new (zeromq().Dealer)({ linger: 0, maxMessageSize: this.maxMessageBytes, ipv6: /^tcp:\/\/\[/.test(this.o.replayEndpoint!) })
    this.dealer = dealer
    let lostConnection = false
    // The answer cannot survive its connection (a dropped one is an oversized answer, or the
    // engine gone): fail now rather than at the timeout.
    dealer.events.on('disconnect', () => {
      lostConnection = true
      dealer.close()
    })
    try {
      dealer.connect(this.o.replayEndpoint!)
      dealer.sendTimeout = timeout
      await dealer.send(['', seqFrame(from)])
      for (;;) {
        const left = deadline - Date.now()
        if (left <= 0) throw new Error(`no end of replay within ${timeout} ms`)
        dealer.receiveTimeout = left
        let msg: Buffer[]
        try {
          msg = await dealer.receive()
        } catch (err) {
          if ((err as NodeJS.ErrnoException).code === 'EAGAIN') throw new Error(`no end of replay within ${timeout} ms`)
          throw err
        }
        const a = readReplayAnswer(msg)
        if (a.kind === 'bad') {
          this.bad(a.what)
          continue
        }
        if (a.kind === 'end') {
          answered = true
          break
        }
        if (out.length >= maxBatches || bytes + a.payload.length > maxBytes) {
          throw new Error(`more than ${maxBatches} batches or ${maxBytes / 1024 / 1024} MiB of payload without the end marker`)
        }
        out.push({ seq: a.seq, payload: a.payload, batch: undefined })
        bytes += a.payload.length
        turnBytes += a.payload.length
        if (++inTurn >= perTurn || turnBytes >= BYTES_PER_TURN) {
          inTurn = 0
          turnBytes = 0
          await turn()
        }
      }
    } catch (err) {
      failure = lostConnection ? 'its connection dropped (an answer over the message cap, or the engine went away)' : (err as Error).message
      if (!this.closed) this.limiter.note('replay', 'warn', `kv events: ${this.o.instance} replay from ${from} failed: ${failure}`, { instance: this.o.instance })
    } finally {
      dealer.close()
      if (this.dealer === dealer) this.dealer = null
    }
    out.sort((a, b) => (a.seq < b.seq ? -1 : a.seq > b.seq ? 1 : 0))
    return { batches: out, answered, failure }
  }

  private log(level: 'info' | 'warn' | 'error', msg: string, fields?: object): void {
    this.o.log?.(level, msg, fields)
  }
}
