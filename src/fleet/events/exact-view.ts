// One endpoint's exact cache view: a KV-event subscriber per instance (and data-parallel
// rank), whose batches are applied to the endpoint's router, and the state an operator reads
// at /admin/instances. The view of an instance is trusted ('fresh') only while its event
// stream is whole: before its first batch, after a gap that could not be replayed (for
// resyncMs), the router routes for it on its approximate estimate instead. A view rebuilt
// from the engine's replay buffer on joining is trusted at once, and reported as rebuilt
// from the buffer's first sequence (0: the whole cache; later: a subset of it).
import type { Logger } from 'pino'
import type { Router } from '../../core/router.js'
import { applyBatch, newCounts, type ApplyCounts } from './apply.js'
import { foreignBlockSize } from './foreign-block-size.js'
import { requireFeature } from '../../core/optional-packages.js'
import { publisherAddresses, type InstanceKvEvents, type KvEventsConfig } from '../../config/kv-events.js'
import { KvEventSubscriber, type KvEventTarget } from './subscriber.js'
import type { KvEventBatch } from './types.js'

export interface ExactViewHost {
  readonly name: string
  readonly router: Router
  /** Tokens per engine block, as the router hashes them. */
  blockSize(): number
}

interface Watched {
  url: string
  subscribers: KvEventSubscriber[]
  replayEndpoints: (string | undefined)[]
  counts: ApplyCounts
  /** Ranks whose first batch has been seen. */
  seen: Set<number>
  resync: NodeJS.Timeout | undefined
  staleWhy: string | undefined
  /** The block size the engine publishes when it is not the router's: its stores are all refused, so the view is distrusted until it restarts. */
  foreignBlockSize: number | undefined
}

export interface InstanceView {
  view: 'fresh' | 'stale' | 'none'
  staleReason: string | null
  gpuBlocks: number
  offloadedBlocks: number
  pendingBlocks: number
  publishers: {
    endpoint: string
    replayEndpoint: string | null
    connected: boolean
    /** Why the publisher is not reached, once kvEvents.connectWarnMs have passed without it. */
    unreachable: string | null
    seq: string | null
    batches: number
    events: number
    /** Messages dropped as unusable (framing, msgpack, a batch's fields). */
    undecodable: number
    /** Events left out of applied batches: malformed (no or mismatched tokens, block_size 0, negative ids, token ids past 2^32-1), or of a type this version does not know. */
    malformedEvents: number
    unknownEvents: number
    /** Messages over kvEvents.maxMessageBytes, refused unread (each a lost batch). */
    oversized: number
    gaps: number
    replays: number
    /** Replays that failed (timed out, overflowed their bounds, lost their connection). */
    replayFailures: number
    restarts: number
    /** The sequence this rank's view was rebuilt from out of the replay buffer ("0": the whole cache; later: blocks stored before it are unknown); null: not rebuilt. */
    rebuiltFrom: string | null
    rebuilds: number
    partialRebuilds: number
    lastBatchAt: string | null
  }[]
  applied: ApplyCounts
}

const WAITING = 'waiting for the first event batch'

export class ExactView {
  readonly #host: ExactViewHost
  #cfg: KvEventsConfig
  readonly #log: Logger
  readonly #watched = new Map<string, Watched>()
  #closed = false

  constructor(host: ExactViewHost, cfg: KvEventsConfig, log: Logger) {
    // Here, with the endpoint, not at the first instance: a discovered fleet joins later.
    requireFeature('kvEvents')
    this.#host = host
    this.#cfg = cfg
    this.#log = log.child({ kvEvents: true })
  }

  get config(): KvEventsConfig {
    return this.#cfg
  }

  /** Subscribes to instances that joined, drops the ones that left (their views go with them). */
  sync(instances: readonly { id: string; url: string; kvEvents?: InstanceKvEvents | undefined }[]): void {
    if (this.#closed) return
    const wanted = new Map(instances.map((i) => [i.id, i]))
    for (const [id, w] of this.#watched) if (!wanted.has(id)) this.#drop(id, w)
    for (const [id, inst] of wanted) {
      if (this.#watched.has(id)) continue
      let addresses
      try {
        addresses = publisherAddresses(inst.url, this.#cfg, inst.kvEvents)
      } catch (err) {
        this.#log.error({ instance: id, err: (err as Error).message }, 'no KV-event subscription for this instance')
        continue
      }
      const w: Watched = { url: inst.url, subscribers: [], replayEndpoints: [], counts: newCounts(), seen: new Set(), resync: undefined, staleWhy: WAITING, foreignBlockSize: undefined }
      this.#watched.set(id, w)
      this.#host.router.exactSetView(id, 'stale')
      for (const a of addresses) {
        const s = new KvEventSubscriber({
          instance: id,
          endpoint: a.endpoint,
          ...(a.replayEndpoint !== undefined && { replayEndpoint: a.replayEndpoint }),
          topic: this.#cfg.topic,
          resyncMs: this.#cfg.resyncMs,
          connectWarnMs: this.#cfg.connectWarnMs,
          maxMessageBytes: this.#cfg.maxMessageBytes,
          target: this.#target(a.rank),
          // `publisher`, not `endpoint`: the endpoint's logger already names the router's endpoint.
          log: (level, msg, fields) => this.#log[level]({ instance: id, publisher: a.endpoint, ...fields }, msg),
        })
        w.subscribers.push(s)
        w.replayEndpoints.push(a.replayEndpoint)
        s.start()
      }
    }
  }

  #target(rank: number): KvEventTarget {
    return {
      batch: (instance: string, batch: KvEventBatch, seq: bigint) => this.#batch(instance, rank, batch, seq),
      reset: (instance: string, why: string) => {
        const w = this.#watched.get(instance)
        if (w === undefined) return
        // A restarted engine starts empty and from sequence 0: its view starts over and is
        // whole again. Other resets (a gap) are followed by stale(). A rank joining ('connect')
        // after another has filled the view (rebuilt it, say) must not wipe that rank's blocks.
        if (why === 'connect' && w.seen.size > 0 && !w.seen.has(rank)) return
        this.#host.router.exactClear(instance)
        if (why === 'restart') {
          w.seen.delete(rank)
          // A new process: maybe started with the router's block size this time.
          w.foreignBlockSize = undefined
        }
      },
      // The subscriber times its own resync after lost batches.
      stale: (instance: string, stale: boolean, why: string) => this.#setStale(instance, stale, why, false),
      // Joining mid-stream with a replay buffer: the view is rebuilt from it, not joined at a
      // sequence. Half-built it is not trusted; applied, it is, as a stream followed from
      // its start is (a buffer that begins later gives a subset: every block it names is held).
      rebuilding: (instance: string, from: bigint) => {
        const w = this.#watched.get(instance)
        if (w === undefined) return
        w.seen.add(rank)
        // Not a loss (no warning): the view was waiting for its first batch until now.
        w.staleWhy = `rebuilding from the replay buffer (batches from ${from})`
        this.#host.router.exactSetView(instance, 'stale')
      },
      rebuilt: (instance: string) => this.#setStale(instance, false, 'rebuilt from the replay buffer', false),
    }
  }

  #batch(instance: string, rank: number, batch: KvEventBatch, seq: bigint): void {
    const w = this.#watched.get(instance)
    if (w === undefined) return
    if (!w.seen.has(rank)) {
      w.seen.add(rank)
      // Sequence 0 is an engine's first batch: nothing came before it, the view is whole.
      // Joining a stream mid-way, what the engine cached before is unknown: the approximate
      // estimate routes for it until resyncMs have passed.
      if (seq === 0n) this.#setStale(instance, false, 'stream followed from its start', false)
      else this.#setStale(instance, true, `joined the event stream at sequence ${seq}`, true)
    }
    const blockSize = this.#host.blockSize()
    applyBatch(this.#host.router, instance, batch, blockSize, w.counts)
    const foreign = foreignBlockSize(batch, blockSize)
    if (foreign !== undefined && foreign !== w.foreignBlockSize) this.#refuseBlockSize(instance, w, foreign, blockSize)
  }

  /**
   * The engine's blocks are `observed` tokens, the router's `blockSize`: everything it stores
   * is refused, and an empty view trusted would draw its prompts away from it. Distrusted (no
   * resync: time does not fix it) until the engine restarts or a reload sets the block size.
   */
  #refuseBlockSize(instance: string, w: Watched, observed: number, blockSize: number): void {
    w.foreignBlockSize = observed
    if (w.resync !== undefined) clearTimeout(w.resync)
    w.resync = undefined
    this.#host.router.exactSetView(instance, 'stale')
    this.#log.warn(
      { instance, observedBlockSize: observed, blockSize },
      `KV-event view distrusted: ${instance} publishes blocks of ${observed} tokens but the router hashes blocks of ${blockSize}, so every block it stores is refused (prefix_router_kv_blocks_skipped_total{reason="block_size"}); the approximate estimate routes for it. Set --kv-block-size ${observed} (routing.exactBlockSize), as vLLM's --block-size`,
    )
  }

  /** `resync`: trust the view again after resyncMs (else whoever made it stale says when). */
  #setStale(instance: string, stale: boolean, why: string, resync: boolean): void {
    const w = this.#watched.get(instance)
    if (w === undefined || this.#closed) return
    if (w.resync !== undefined) clearTimeout(w.resync)
    w.resync = undefined
    // Refused blocks leave the view empty, however whole the stream: it stays distrusted, for that reason.
    if (w.foreignBlockSize !== undefined) return
    if (!stale) {
      w.staleWhy = undefined
      this.#host.router.exactSetView(instance, 'fresh')
      return
    }
    w.staleWhy = why
    this.#host.router.exactSetView(instance, 'stale')
    this.#log.warn({ instance, why, resyncMs: this.#cfg.resyncMs }, 'KV-event view distrusted: routing on the approximate estimate for this instance meanwhile')
    if (!resync) return
    w.resync = setTimeout(() => {
      w.resync = undefined
      if (this.#watched.get(instance) !== w || w.foreignBlockSize !== undefined) return
      this.#log.info({ instance }, 'KV-event view trusted again')
      w.staleWhy = undefined
      this.#host.router.exactSetView(instance, 'fresh')
    }, this.#cfg.resyncMs)
    w.resync.unref()
  }

  #drop(id: string, w: Watched): void {
    this.#watched.delete(id)
    if (w.resync !== undefined) clearTimeout(w.resync)
    for (const s of w.subscribers) void s.close()
    this.#host.router.exactSetView(id, 'none')
  }

  status(id: string): InstanceView | undefined {
    const w = this.#watched.get(id)
    if (w === undefined) return undefined
    const v = this.#host.router.exactInstance(id)
    return {
      view: v?.view ?? 'none',
      staleReason:
        w.foreignBlockSize !== undefined
          ? `its events are refused: the engine's blocks are ${w.foreignBlockSize} tokens, the router's ${this.#host.blockSize()} (--kv-block-size, routing.exactBlockSize)`
          : this.#waitingWhy(w),
      gpuBlocks: v?.gpuBlocks ?? 0,
      offloadedBlocks: v?.offloadedBlocks ?? 0,
      pendingBlocks: v?.pendingBlocks ?? 0,
      publishers: w.subscribers.map((s, i) => {
        const st = s.status()
        return {
          endpoint: st.endpoint,
          replayEndpoint: w.replayEndpoints[i] ?? null,
          connected: st.connected,
          unreachable: st.unreachable,
          seq: st.seq === null ? null : String(st.seq),
          batches: st.batches,
          events: st.events,
          undecodable: st.undecodable,
          malformedEvents: st.badEvents,
          unknownEvents: st.skippedEvents,
          oversized: st.oversized,
          gaps: st.gaps,
          replays: st.replays,
          replayFailures: st.replayFailures,
          restarts: st.restarts,
          rebuiltFrom: st.rebuiltFrom === null ? null : String(st.rebuiltFrom),
          rebuilds: st.rebuilds,
          partialRebuilds: st.partialRebuilds,
          lastBatchAt: st.lastBatchAt === null ? null : new Date(st.lastBatchAt).toISOString(),
        }
      }),
      applied: w.counts,
    }
  }

  /** Waiting for a first batch from a publisher not even reached says so, and why. */
  #waitingWhy(w: Watched): string | null {
    if (w.staleWhy !== WAITING) return w.staleWhy ?? null
    const missing = w.subscribers.map((s) => s.status()).filter((st) => !st.connected)
    if (missing.length === 0) return WAITING
    return missing.map((st) => `not connected to the publisher at ${st.endpoint}${st.unreachable === null ? ' (connecting)' : `: ${st.unreachable}`}`).join('; ')
  }

  ids(): string[] {
    return [...this.#watched.keys()]
  }

  async close(): Promise<void> {
    this.#closed = true
    const all = [...this.#watched.values()]
    this.#watched.clear()
    for (const w of all) if (w.resync !== undefined) clearTimeout(w.resync)
    await Promise.all(all.flatMap((w) => w.subscribers.map((s) => s.close())))
  }
}
