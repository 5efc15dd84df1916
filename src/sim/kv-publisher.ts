// A simulated engine's KV events on the wire, as vLLM's ZmqEventPublisher sends them: a PUB
// socket sending [topic, seq (8 bytes big-endian), msgpack EventBatch] per engine step, and
// optionally a ROUTER socket answering replay requests from the last `bufferSteps` batches.
// Sequence numbers start at 0 with the process: restart() is a new engine process, so it
// also closes the sockets and binds new ones on the same ports, and subscribers see their
// connection drop and come back, as they do when a vLLM process is replaced.
//
// The PUB socket is ZeroMQ's XPUB (a PUB that also reads its peers' subscriptions), so the
// sim can tell how many subscribers it has: a test waits for one before publishing, since
// PUB drops whatever it sends before a subscription has arrived.
//
// Faults, for the router's recovery paths: a share of batches is not sent live (their
// sequence number is used up, so a subscriber sees a gap; they stay in the replay buffer,
// as a batch lost on the network would), and batches can be held back N ms (in order).
import { Router, XPublisher } from 'zeromq'
import { encodeBatch } from '../fleet/events/codec.js'
import { endpointPort, readSeq, seqFrame, tcpEndpoint } from '../fleet/events/frames.js'
import type { KvEvent, KvEventEncoding } from '../fleet/events/types.js'
import { KvBindError, type KvSocketKind } from './kv-bind-error.js'

export interface KvEventPublisherOptions {
  host: string
  /** PUB port; 0 picks a free one. */
  port: number
  /** ROUTER port for replays; 0 picks a free one; undefined: no replay. */
  replayPort?: number
  topic?: string
  encoding?: KvEventEncoding
  /** How replay answers are framed (default 'topic', vLLM 0.26.0 and later). */
  replayFraming?: KvReplayFraming
  /** Batches kept for replay (vLLM's buffer_steps). */
  bufferSteps?: number
  /** Written into every batch, as vLLM's publisher does (default 0). */
  dataParallelRank?: number
  faults?: Partial<KvPublishFaults>
}

export interface KvPublishFaults {
  /** Share of batches not sent live (0 to 1), drawn from `seed`. */
  dropRate: number
  /** Wall milliseconds every batch is held back before it is sent. */
  delayMs: number
  seed: number
}

/**
 * vLLM's replay answer framing: since 0.26.0 an answer carries the topic like a live message,
 * ["", topic, seq, payload], and the end marker ["", "", -1, ""]; before, ["", seq, payload]
 * and ["", -1, ""].
 */
export type KvReplayFraming = 'topic' | 'legacy'

export const KV_REPLAY_FRAMINGS: readonly KvReplayFraming[] = ['topic', 'legacy']

export const NO_KV_FAULTS: Readonly<KvPublishFaults> = { dropRate: 0, delayMs: 0, seed: 1 }

export const DEFAULT_BUFFER_STEPS = 10_000

type Frames = [Buffer, Buffer, Uint8Array]

interface Sockets {
  pub: XPublisher
  router: Router | null
}

/** Binds the PUB (an XPUB) and the optional ROUTER; closes what it opened if a bind fails. */
async function bindSockets(host: string, port: number | '*', replayPort: number | '*' | undefined): Promise<Sockets> {
  const ipv6 = host.includes(':')
  const pub = new XPublisher({ linger: 0, sendHighWaterMark: 100_000, ipv6 })
  pub.verbosity = 'allSubsUnsubs' // every subscriber's (un)subscription, not only the first of a topic
  let router: Router | null = null
  let at: [KvSocketKind, number | '*'] = ['pub', port]
  try {
    await pub.bind(tcpEndpoint(host, port))
    if (replayPort !== undefined) {
      at = ['replay', replayPort]
      router = new Router({ linger: 0, ipv6 })
      await router.bind(tcpEndpoint(host, replayPort))
    }
  } catch (err) {
    pub.close()
    router?.close()
    throw new KvBindError(at[0], tcpEndpoint(host, at[1]), at[1] === '*' ? 0 : at[1], err)
  }
  return { pub, router }
}

const EMPTY = { seq: -1, payload: new Uint8Array(0) }

export class KvEventPublisher {
  readonly encoding: KvEventEncoding
  readonly topic: string
  readonly replayFraming: KvReplayFraming
  /** Batches sent live, dropped by the fault, and replay requests answered. */
  sent = 0
  dropped = 0
  replays = 0
  /** Sends that failed (the socket's error is kept in lastError); the publisher carries on. */
  errors = 0
  lastError: Error | null = null
  /** Subscriptions received minus unsubscriptions: roughly, subscribers connected. */
  subscribers = 0
  private seq = 0
  /** The replay buffer: entries from bufferHead on (a moving head, so trimming is O(1)). */
  private buffer: { seq: number; payload: Uint8Array }[] = []
  private bufferHead = 0
  private readonly bufferSteps: number
  private readonly rank: number
  private faultCfg: KvPublishFaults
  private rng: number
  /** Bumped by restart: batches held back by the delay fault belong to the old process. */
  private epoch = 0
  private readonly queue: Frames[] = []
  private queueHead = 0
  private sending = false
  private closed = false
  private readonly topicFrame: Buffer
  private pub: XPublisher
  private router: Router | null
  /** Resolves once the sockets of the current process are bound (at once, but during a restart). */
  private ready: Promise<void> = Promise.resolve()
  private readonly host: string

  private constructor(
    sockets: Sockets,
    readonly endpoint: string,
    readonly replayEndpoint: string | null,
    o: KvEventPublisherOptions,
  ) {
    this.pub = sockets.pub
    this.router = sockets.router
    this.host = o.host
    this.encoding = o.encoding ?? 'map'
    this.topic = o.topic ?? ''
    this.replayFraming = o.replayFraming ?? 'topic'
    this.topicFrame = Buffer.from(this.topic, 'utf8')
    this.bufferSteps = o.bufferSteps ?? DEFAULT_BUFFER_STEPS
    this.rank = o.dataParallelRank ?? 0
    this.faultCfg = { ...NO_KV_FAULTS, ...o.faults }
    this.rng = this.faultCfg.seed >>> 0
    this.serve(sockets)
  }

  /** Binds the sockets (vLLM binds; subscribers connect). */
  static async open(o: KvEventPublisherOptions): Promise<KvEventPublisher> {
    const encoding = o.encoding ?? 'map'
    if (encoding !== 'map' && encoding !== 'array') throw new RangeError(`encoding must be 'map' or 'array'; got ${JSON.stringify(encoding)}`)
    if (o.replayFraming !== undefined && !KV_REPLAY_FRAMINGS.includes(o.replayFraming)) {
      throw new RangeError(`replayFraming must be 'topic' or 'legacy'; got ${JSON.stringify(o.replayFraming)}`)
    }
    const steps = o.bufferSteps ?? DEFAULT_BUFFER_STEPS
    if (!Number.isInteger(steps) || steps < 1) throw new RangeError(`bufferSteps must be a positive integer; got ${steps}`)
    checkFaults(o.faults ?? {})
    const sockets = await bindSockets(o.host, o.port === 0 ? '*' : o.port, o.replayPort === 0 ? '*' : o.replayPort)
    const display = (s: { lastEndpoint: string | null }): string => tcpEndpoint(o.host, endpointPort(s.lastEndpoint!))
    return new KvEventPublisher(sockets, display(sockets.pub), sockets.router === null ? null : display(sockets.router), o)
  }

  get port(): number {
    return endpointPort(this.endpoint)
  }

  get replayPort(): number | null {
    return this.replayEndpoint === null ? null : endpointPort(this.replayEndpoint)
  }

  /** The sequence number the next batch gets. */
  get nextSeq(): number {
    return this.seq
  }

  get faults(): Readonly<KvPublishFaults> {
    return this.faultCfg
  }

  setFaults(f: Partial<KvPublishFaults>): void {
    checkFaults(f)
    this.faultCfg = { ...NO_KV_FAULTS, ...f }
    this.rng = this.faultCfg.seed >>> 0
  }

  /** Publishes one engine step's events at engine wall time `tsSeconds`. */
  publish(events: KvEvent[], tsSeconds: number): void {
    if (this.closed || events.length === 0) return
    const seq = this.seq++
    const payload = encodeBatch({ ts: tsSeconds, events, dataParallelRank: this.rank }, this.encoding)
    this.buffer.push({ seq, payload })
    if (this.buffer.length - this.bufferHead > this.bufferSteps) this.buffer[this.bufferHead++] = EMPTY
    if (this.bufferHead >= this.bufferSteps) {
      this.buffer = this.buffer.slice(this.bufferHead)
      this.bufferHead = 0
    }
    const { dropRate, delayMs } = this.faultCfg
    if (dropRate > 0 && this.random() < dropRate) {
      this.dropped++
      return
    }
    const frames: Frames = [this.topicFrame, seqFrame(seq), payload]
    if (delayMs > 0) {
      const epoch = this.epoch
      // One delay for all, so timers fire in publish order.
      setTimeout(() => {
        if (epoch === this.epoch) this.enqueue(frames)
      }, delayMs).unref()
    } else this.enqueue(frames)
  }

  /**
   * A new engine process: sequence numbers start over at 0, the replay buffer is empty,
   * and the sockets are replaced (subscribers reconnect by themselves). Batches published
   * meanwhile wait for the new sockets. Resolves once they are bound.
   */
  restart(): Promise<void> {
    this.seq = 0
    this.buffer = []
    this.bufferHead = 0
    this.epoch++
    this.queue.length = this.queueHead = 0
    this.subscribers = 0
    // After any rebind in progress: the sockets to replace are the newest ones.
    this.ready = this.ready.then(() => this.rebind({ pub: this.pub, router: this.router }))
    return this.ready
  }

  async close(): Promise<void> {
    if (this.closed) return
    this.closed = true
    await this.ready
    this.pub.close()
    this.router?.close()
  }

  private async rebind(old: Sockets): Promise<void> {
    if (this.closed) return
    old.pub.close()
    old.router?.close()
    // The old listeners close on ZeroMQ's I/O thread: the same port can be busy for a moment.
    for (let attempt = 0; ; attempt++) {
      try {
        const sockets = await bindSockets(this.host, this.port, this.replayPort ?? undefined)
        if (this.closed) {
          sockets.pub.close()
          sockets.router?.close()
          return
        }
        this.pub = sockets.pub
        this.router = sockets.router
        this.serve(sockets)
        return
      } catch (err) {
        if (attempt >= 100 || (err as NodeJS.ErrnoException).code !== 'EADDRINUSE') {
          this.failed(err)
          return
        }
        await new Promise((r) => setTimeout(r, 10))
      }
    }
  }

  private serve(sockets: Sockets): void {
    const epoch = this.epoch
    if (sockets.router !== null) void this.serveReplays(sockets.router, epoch)
    void this.watchSubscriptions(sockets.pub, epoch)
  }

  // zeromq.js allows one send in progress per socket: live frames go out through a queue.
  private enqueue(frames: Frames): void {
    if (this.closed) return
    this.queue.push(frames)
    if (!this.sending) void this.pump()
  }

  private async pump(): Promise<void> {
    this.sending = true
    try {
      while (this.queueHead < this.queue.length && !this.closed) {
        await this.ready
        const epoch = this.epoch
        const frames = this.queue[this.queueHead++]
        if (frames === undefined) break // a restart emptied the queue meanwhile
        try {
          await this.pub.send(frames)
          this.sent++
        } catch (err) {
          if (epoch === this.epoch) this.failed(err) // else: the old process's socket, closed by the restart
        }
      }
    } finally {
      this.queue.length = this.queueHead = 0
      this.sending = false
    }
  }

  // vLLM's _service_replay: a request is [identity, "", start seq]; every buffered batch
  // from start on goes back as [identity, "", topic, seq, payload], then
  // [identity, "", "", -1, ""] (the legacy framing: no topic frame in either).
  private async serveReplays(router: Router, epoch: number): Promise<void> {
    try {
      for await (const msg of router) {
        if (msg.length !== 3) continue // vLLM logs and ignores a malformed request
        const [id, , startFrame] = msg as [Buffer, Buffer, Buffer]
        const start = readSeq(startFrame)
        if (start === null) continue
        this.replays++
        const from = start < 0n ? 0 : Number(start)
        const topic = this.replayFraming === 'topic'
        try {
          for (const b of this.buffer.slice(this.bufferHead)) {
            if (b.seq >= from) await router.send(topic ? [id, '', this.topicFrame, seqFrame(b.seq), b.payload] : [id, '', seqFrame(b.seq), b.payload])
          }
          await router.send(topic ? [id, '', '', seqFrame(-1), ''] : [id, '', seqFrame(-1), ''])
        } catch (err) {
          if (epoch === this.epoch) this.failed(err) // this requester's answer is cut short; the next one is served
        }
      }
    } catch (err) {
      if (epoch === this.epoch) this.failed(err)
    }
  }

  private failed(err: unknown): void {
    if (this.closed) return
    this.errors++
    this.lastError = err instanceof Error ? err : new Error(String(err))
  }

  // A subscription message is one frame: 1 (subscribe) or 0 (unsubscribe), then the topic.
  private async watchSubscriptions(pub: XPublisher, epoch: number): Promise<void> {
    try {
      for await (const [frame] of pub) {
        if (frame === undefined || frame.length === 0 || epoch !== this.epoch) continue
        if (frame[0] === 1) this.subscribers++
        else if (frame[0] === 0 && this.subscribers > 0) this.subscribers--
      }
    } catch (err) {
      if (epoch === this.epoch) this.failed(err)
    }
  }

  // mulberry32, as the request faults draw.
  private random(): number {
    let t = (this.rng = (this.rng + 0x6d2b79f5) >>> 0)
    t = Math.imul(t ^ (t >>> 15), t | 1)
    t ^= t + Math.imul(t ^ (t >>> 7), t | 61)
    return ((t ^ (t >>> 14)) >>> 0) / 4294967296
  }
}

function checkFaults(f: Partial<KvPublishFaults>): void {
  if (f.dropRate !== undefined && !(typeof f.dropRate === 'number' && f.dropRate >= 0 && f.dropRate <= 1)) {
    throw new RangeError(`kv drop rate must be a number from 0 to 1; got ${f.dropRate}`)
  }
  if (f.delayMs !== undefined && !(typeof f.delayMs === 'number' && f.delayMs >= 0 && f.delayMs <= 3_600_000)) {
    throw new RangeError(`kv delay must be a number of milliseconds from 0 to 3600000; got ${f.delayMs}`)
  }
}
