// The socket side of a KV-event subscriber: the SUB connection to one engine's publisher
// (connected, dropped, given up by ZeroMQ and made again), the receive loop in bounded turns,
// frames parsed and payloads decoded, the replay socket's answers, and the log. What the
// batches mean, in sequence order, is the subscriber's (subscriber.ts), through handle().
import type { Dealer, Subscriber } from 'zeromq'
import { decodeBatch, KvEventDecodeError, type DecodedBatch } from './codec.js'
import { readSeq, SEQ_BYTES } from './frames.js'
import { LogLimiter } from './log-limiter.js'
import { DEFAULT_CONNECT_WARN_MS, PublisherReach } from './publisher-reach.js'
import { fetchReplay, turn, type Pending, type Replayed } from './replay-fetch.js'
import { BYTES_PER_TURN, checkSubscriberOptions, DEFAULT_MAX_MESSAGE_BYTES, DEFAULT_MAX_PER_TURN, type KvEventSubscriberOptions } from './subscriber-options.js'
import { zeromq } from './zeromq.js'

/** ZeroMQ schedules a reconnect at once after an ordinary disconnect; none within this long means it gave the connection up. */
const RETRY_WATCH_MS = 1_000

export abstract class KvEventConnection {
  protected readonly o: KvEventSubscriberOptions
  private sub: Subscriber | null = null
  private dealer: Dealer | null = null
  protected closed = false
  protected connected = false
  protected reach: PublisherReach | undefined
  /** Watches for ZeroMQ's reconnect after a disconnect (none: it gave the connection up). */
  private retryWatch: NodeJS.Timeout | undefined
  /** A rebuild in flight (asked at the connect): messages wait for it. */
  protected busy: Promise<void> | null = null
  protected readonly limiter: LogLimiter
  protected readonly counts = {
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

  constructor(o: KvEventSubscriberOptions) {
    checkSubscriberOptions(o)
    this.o = o
    this.limiter = new LogLimiter((level, msg, fields) => this.log(level, msg, fields), `${o.instance} (${o.endpoint})`, o.logIntervalMs)
  }

  /** One batch through the sequence rules; receiving waits for it. */
  protected abstract handle(p: Pending): Promise<void>
  /** The connection is made (again). */
  protected abstract connectedAgain(): void
  /** The connection dropped. */
  protected abstract disconnected(): void
  /** close(), before the sockets go. */
  protected abstract closing(): void

  protected get maxMessageBytes(): number {
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
      this.connectedAgain()
    })
    sub.events.on('disconnect', () => {
      this.connected = false
      this.disconnected()
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
    this.closing()
    this.reach?.stop()
    clearTimeout(this.retryWatch)
    this.limiter.close()
    this.sub?.close()
    this.dealer?.close()
    this.connected = false
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
  protected decoded(p: Pending): DecodedBatch | null {
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

  protected bad(what: string): void {
    this.counts.undecodable++
    this.limiter.note('bad', 'warn', `kv events: ${this.o.instance} dropped ${what}`, { instance: this.o.instance })
  }

  /** The batches replayed from `from` on (replay-fetch.ts). */
  protected fetchReplay(from: bigint): Promise<Replayed> {
    return fetchReplay(this.o, from, this.maxMessageBytes, {
      opened: (d) => (this.dealer = d),
      done: (d) => {
        if (this.dealer === d) this.dealer = null
      },
      closed: () => this.closed,
      bad: (what) => this.bad(what),
      warn: (msg, fields) => this.limiter.note('replay', 'warn', msg, fields),
    })
  }

  protected log(level: 'info' | 'warn' | 'error', msg: string, fields?: object): void {
    this.o.log?.(level, msg, fields)
  }
}
