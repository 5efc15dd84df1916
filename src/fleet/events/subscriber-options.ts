// What a KV-event subscriber is given (its target, logger and bounds), what it reports, and its
// defaults: the subscriber (subscriber.ts) and its replay (replay-fetch.ts) read them.
import type { KvEventBatch } from './types.js'

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

export const DEFAULT_RESYNC_MS = 30_000
export const DEFAULT_MAX_PER_TURN = 256
export const DEFAULT_REPLAY_TIMEOUT_MS = 2_000
export const DEFAULT_MAX_MESSAGE_BYTES = 1024 * 1024
export const DEFAULT_MAX_REPLAY_BATCHES = 20_000
export const DEFAULT_MAX_REPLAY_BYTES = 64 * 1024 * 1024
export const DEFAULT_REPLAY_BACKOFF_MS = 1_000
export const MAX_REPLAY_BACKOFF_MS = 60_000
/** A turn of the event loop handles at most this much payload (and at least one message). */
export const BYTES_PER_TURN = 1024 * 1024

/** Throws for options no subscriber can run with (a bad endpoint, a bound that is not a positive integer). */
export function checkSubscriberOptions(o: KvEventSubscriberOptions): void {
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
}
