// `serve --share-load redis://…`: router replicas share their queued prefill. Every
// intervalMs this replica reads its own queued prefill (and requests in flight) per instance
// from its routers and, if anything changed since its last publication or a heartbeat's time
// has passed, publishes one message on `<prefix>:load`. It hears the others' on the same
// channel and gives, per instance, the sum of their latest figures to a sink (the router's
// load beyond its own leases). Nothing happens per request: the cost is bounded by the
// interval and the fleet's size. Redis down: routing goes on with this replica's own counts,
// the others' figures expiring after expireMs; the connections come back by themselves.
import { pino, type Logger } from 'pino'
import type { Router } from '../../core/router.js'
import { requireFeature } from '../../core/optional-packages.js'
import { replicaIdSchema, SHARE_EXPIRE, SHARE_INTERVAL, SHARE_PREFIX_DEFAULT } from '../../config/share-load.js'
import type { RedisLink } from './link.js'
import { decodeLoad, encodeBye, encodeLoad, leadingReplica, type Figures } from './message.js'
import { MAX_PEERS, PeerTable, type PeerReport } from './peers.js'
import { redactRedisUrl } from '../../config/redis-url.js'
import { NO_SINK, type SharedLoadSink } from './sink.js'

/** An endpoint as the publisher reads it: its name and its router's own counters. */
export interface LoadSource {
  readonly name: string
  readonly router: Pick<Router, 'instances'>
}

export interface ShareLoadOptions {
  /** redis://host:port[/db] or rediss://; checked by the configuration (redisUrlProblem). */
  url: string
  replicaId: string
  /** The endpoints whose routers this replica publishes, read at every interval. */
  endpoints: () => Iterable<LoadSource>
  intervalMs?: number
  /** The channel is `<prefix>:load`. */
  prefix?: string
  expireMs?: number
  /** At least one message this often, changed or not (default 1000 ms). */
  heartbeatMs?: number
  sink?: SharedLoadSink
  log?: Logger
}

export interface ShareLoadCounts {
  /** Messages Redis took from this replica. */
  sent: number
  /** Other replicas' messages taken. */
  received: number
  /** Messages on the channel that were not a replica's (malformed), dropped. */
  dropped: number
  /** Messages from a new replica id while MAX_PEERS others were counting, dropped. */
  refused: number
  /** Times the connection was lost, or at start could not be made. */
  connectionFailures: number
}

export interface ShareLoadReport {
  replica: string
  url: string
  channel: string
  intervalMs: number
  expireMs: number
  connected: boolean
  messages: { sent: number; received: number; dropped: number; refused: number }
  /** The most replicas whose figures are kept (MAX_PEERS). */
  maxPeers: number
  connectionFailures: number
  /** Replicas heard from within expireMs. */
  peers: PeerReport[]
  /** Per endpoint and instance: the sum of the peers' queued prefill, in blocks (zeros left out). */
  sharedPrefillBlocks: Figures
  /** This replica's own queued prefill, as it publishes it. */
  ownPrefillBlocks: Figures
}

const CHANNEL_SUFFIX = ':load'
/**
 * A PUBLISH unanswered this long (or twice expireMs) marks the connection lost, for a socket
 * that stays open to a Redis that is gone (TCP keep-alive takes longer to tell). The others'
 * figures do not wait for it: they expire after expireMs whatever the state.
 */
const ANSWER_TIMEOUT_MS = 5000
/** Messages remembered to recognise our own (10 s of them at 10 ms). */
const SENT_RING = 1024
/** The longest stretch of one turn of the event loop spent reading the others' messages. */
const TURN_MS = 2
/** Characters of messages held waiting for their turn (32 bursts of a thousand 1 KB messages); past it, dropped. */
const INBOX_CHARS = 32 << 20

export class ShareLoad {
  readonly replica: string
  readonly channel: string
  readonly intervalMs: number
  readonly expireMs: number
  readonly #url: string
  readonly #heartbeatMs: number
  readonly #endpoints: () => Iterable<LoadSource>
  readonly #log: Logger
  readonly #peers: PeerTable
  readonly #counts: ShareLoadCounts = { sent: 0, received: 0, dropped: 0, refused: 0, connectionFailures: 0 }
  #link!: RedisLink
  #timer: NodeJS.Timeout | undefined
  #seq = 0
  #lastLoad = ''
  #lastInFlight = ''
  #lastSentAt = -Infinity
  #lastRewrite = 0
  #everUp = false
  #downSince = 0
  /** Why the connection is down (undefined while up, or still connecting at start). */
  #downReason: string | undefined
  #warned = new Set<string>()
  /** The `ts` of each of the last SENT_RING messages sent, by seq: what comes back under our id and is not among them is another process's. */
  readonly #sentTs = new Float64Array(SENT_RING)
  /** Instance ids as JSON strings, reused from one interval to the next. */
  #quoted = new Map<string, string>()
  /** Messages waiting to be read (from #inboxHead on), their characters, and whether a turn is scheduled. */
  #inbox: string[] = []
  #inboxHead = 0
  #inboxChars = 0
  #draining = false

  private constructor(opts: ShareLoadOptions) {
    // It travels in every message and names the connections (CLIENT SETNAME takes no spaces).
    if (!replicaIdSchema.safeParse(opts.replicaId).success) throw new RangeError(`share-load: replicaId must be 1-128 printable ASCII characters without spaces; got ${JSON.stringify(opts.replicaId)}`)
    this.replica = opts.replicaId
    this.#url = opts.url
    this.channel = `${opts.prefix ?? SHARE_PREFIX_DEFAULT}${CHANNEL_SUFFIX}`
    this.intervalMs = opts.intervalMs ?? SHARE_INTERVAL.default
    this.expireMs = opts.expireMs ?? SHARE_EXPIRE.default
    this.#heartbeatMs = opts.heartbeatMs ?? 1000
    if (!(this.intervalMs > 0 && this.#heartbeatMs >= this.intervalMs && this.expireMs > this.#heartbeatMs)) {
      throw new RangeError(`share-load: needs 0 < intervalMs (${this.intervalMs}) <= heartbeatMs (${this.#heartbeatMs}) < expireMs (${this.expireMs})`)
    }
    this.#endpoints = opts.endpoints
    this.#log = opts.log ?? pino({ level: 'silent' })
    this.#peers = new PeerTable(this.replica, this.#guard(opts.sink ?? NO_SINK))
  }

  /**
   * Starts sharing: resolves once the Redis client is loaded, never waiting for Redis itself
   * (its connections are made, and made again, in the background).
   */
  static async start(opts: ShareLoadOptions): Promise<ShareLoad> {
    requireFeature('shareLoad')
    const s = new ShareLoad(opts)
    const { RedisLink } = await import('./link.js')
    s.#link = new RedisLink(
      { url: opts.url, channel: s.channel, clientName: `prefix-router:${s.replica}`, answerTimeoutMs: Math.max(ANSWER_TIMEOUT_MS, 2 * s.expireMs) },
      { message: (text) => s.#onMessage(text), state: (up, reason) => s.#onState(up, reason) },
    )
    s.#link.start()
    s.#timer = setInterval(() => s.tick(), s.intervalMs)
    s.#timer.unref()
    return s
  }

  get connected(): boolean {
    return this.#link.connected
  }

  /** Why Redis is not connected, once a connection failed; undefined while connected or still connecting at start. */
  get downReason(): string | undefined {
    return this.connected ? undefined : this.#downReason
  }

  get counts(): Readonly<ShareLoadCounts> {
    return this.#counts
  }

  /** Replicas heard from within expireMs. */
  peerCount(now = performance.now()): number {
    this.#expire(now)
    return this.#peers.size
  }

  /** The other replicas' queued prefill summed, per endpoint and instance (zeros left out). */
  shared(): Figures {
    return this.#peers.shared()
  }

  report(now = performance.now()): ShareLoadReport {
    this.#expire(now)
    const [own] = this.#readOwn()
    return {
      replica: this.replica,
      url: redactRedisUrl(this.#url),
      channel: this.channel,
      intervalMs: this.intervalMs,
      expireMs: this.expireMs,
      connected: this.connected,
      messages: { sent: this.#counts.sent, received: this.#counts.received, dropped: this.#counts.dropped, refused: this.#counts.refused },
      maxPeers: MAX_PEERS,
      connectionFailures: this.#counts.connectionFailures,
      peers: this.#peers.report(now),
      sharedPrefillBlocks: this.#peers.shared(),
      ownPrefillBlocks: JSON.parse(own) as Figures,
    }
  }

  /** @internal One interval's work: publish if due, drop silent peers. The timer calls it. */
  tick(now = performance.now()): void {
    const [load, inFlight] = this.#readOwn()
    if (load !== this.#lastLoad || inFlight !== this.#lastInFlight || now - this.#lastSentAt >= this.#heartbeatMs) {
      const ts = Date.now()
      const sent = this.#link.publish(encodeLoad(this.replica, this.#seq, ts, load, inFlight), now)
      if (sent !== undefined) {
        this.#sentTs[this.#seq % SENT_RING] = ts
        this.#seq++
        this.#lastLoad = load
        this.#lastInFlight = inFlight
        this.#lastSentAt = now
        void sent.then((ok) => {
          if (ok) this.#counts.sent++
          // Not taken: the next interval sends the latest figures again.
          else this.#lastLoad = ''
        })
      }
    }
    this.#expire(now)
    if (now - this.#lastRewrite >= this.#heartbeatMs) {
      this.#lastRewrite = now
      this.#peers.rewrite()
    }
  }

  /** Drops the peers silent for expireMs (here as at every interval: the gauge, the report and the sums agree). */
  #expire(now: number): void {
    const gone = this.#peers.expire(now, this.expireMs)
    if (gone.length > 0) this.#log.info({ replicas: gone, expireMs: this.expireMs }, 'share-load: replica silent; its queued prefill no longer counts here')
  }

  /** This replica's own figures as JSON: queued prefill blocks and requests in flight, by endpoint and instance. */
  #readOwn(): [string, string] {
    let load = '{'
    let inFlight = '{'
    for (const ep of this.#endpoints()) {
      let rows
      try {
        rows = ep.router.instances()
      } catch {
        continue // an endpoint a reload removed: its router is closed
      }
      const name = this.#quote(ep.name)
      if (load.length > 1) {
        load += ','
        inFlight += ','
      }
      load += `${name}:{`
      inFlight += `${name}:{`
      for (let i = 0; i < rows.length; i++) {
        const r = rows[i]!
        const id = this.#quote(r.id)
        const sep = i === 0 ? '' : ','
        load += `${sep}${id}:${r.queuedPrefillBlocks}`
        inFlight += `${sep}${id}:${r.inFlight}`
      }
      load += '}'
      inFlight += '}'
    }
    return [`${load}}`, `${inFlight}}`]
  }

  #quote(s: string): string {
    let q = this.#quoted.get(s)
    if (q === undefined) {
      if (this.#quoted.size >= 65536) this.#quoted.clear()
      this.#quoted.set(s, (q = JSON.stringify(s)))
    }
    return q
  }

  #onMessage(text: string): void {
    // A full table refuses a new id whatever its message says: known from the first bytes, it
    // costs no parse (a thousand ids of a hostile publisher cost their ids, not their JSON).
    const lead = leadingReplica(text)
    if (lead !== undefined && this.#peers.refuses(lead)) return this.#refused(lead)
    if (this.#inboxChars + text.length > INBOX_CHARS) {
      this.#counts.dropped++
      this.#once('inbox', 'warn', { channel: this.channel, waitingChars: this.#inboxChars }, `share-load: more than ${INBOX_CHARS} characters of messages waiting to be read; dropped (counted in prefix_router_share_load_messages_total{direction="dropped"})`)
      return
    }
    this.#inbox.push(text)
    this.#inboxChars += text.length
    if (!this.#draining) {
      this.#draining = true
      setImmediate(this.#drain)
    }
  }

  /**
   * Reads the waiting messages, for at most TURN_MS of each turn of the event loop: a burst
   * (Redis hands over what a socket read holds, megabytes of it) is parsed over several
   * turns, with the requests' work between them, not in one stretch.
   */
  readonly #drain = (): void => {
    const end = performance.now() + TURN_MS
    const inbox = this.#inbox
    while (this.#inboxHead < inbox.length) {
      const text = inbox[this.#inboxHead]!
      inbox[this.#inboxHead++] = ''
      this.#inboxChars -= text.length
      if (this.#timer !== undefined) this.#take(text)
      if (performance.now() >= end) break
    }
    if (this.#inboxHead < inbox.length) {
      setImmediate(this.#drain)
      return
    }
    this.#inbox = []
    this.#inboxHead = 0
    this.#draining = false
  }

  #take(text: string): void {
    const m = decodeLoad(text)
    if (typeof m === 'string') {
      this.#counts.dropped++
      this.#once('malformed', 'warn', { channel: this.channel, reason: m, sample: text.slice(0, 200) }, 'share-load: a message on the channel is not a replica\'s load; dropped (counted in prefix_router_share_load_messages_total{direction="dropped"})')
      return
    }
    const r = this.#peers.accept(m, performance.now())
    if (r === 'own') {
      // Ours come back as they were sent; another process given our id sends others.
      const ours = m.seq < this.#seq && m.seq >= this.#seq - SENT_RING && this.#sentTs[m.seq % SENT_RING] === m.ts
      if (!ours && !m.bye) this.#once('same-id', 'warn', { replica: this.replica }, 'share-load: another process publishes under this replica\'s id; give each replica its own --replica-id')
      return
    }
    if (r === 'refused') return this.#refused(m.replica)
    this.#counts.received++
    if (r === 'new') this.#log.info({ replica: m.replica }, 'share-load: replica heard')
    else if (r === 'bye') this.#log.info({ replica: m.replica }, 'share-load: replica stopped; its queued prefill no longer counts here')
    else if (r === 'restarted') this.#once(`restart:${m.replica}`, 'info', { replica: m.replica }, 'share-load: a replica\'s sequence went back: it restarted under the same --replica-id (or two replicas share one)')
  }

  #refused(replica: string): void {
    this.#counts.refused++
    this.#once('refused', 'warn', { replica, maxPeers: MAX_PEERS }, `share-load: more than ${MAX_PEERS} other replicas publish on the channel; this one's figures are not counted (nor any new one's until a replica leaves; counted in prefix_router_share_load_messages_total{direction="refused"})`)
  }

  #onState(up: boolean, reason: string | undefined): void {
    const url = redactRedisUrl(this.#url)
    this.#downReason = up ? undefined : (reason ?? 'connection closed')
    if (up) {
      if (this.#everUp) this.#log.info({ url, downMs: Math.round(performance.now() - this.#downSince) }, 'share-load: Redis connection restored; sharing queued prefill again')
      else this.#log.info({ url, channel: this.channel, replica: this.replica }, 'share-load: connected to Redis; sharing queued prefill')
      this.#everUp = true
      return
    }
    this.#counts.connectionFailures++
    this.#downSince = performance.now()
    if (this.#everUp) {
      this.#log.warn({ url, reason, expireMs: this.expireMs }, "share-load: lost the Redis connection; routing on this replica's own counts once the others' figures expire, reconnecting")
    } else {
      this.#log.warn({ url, reason }, "share-load: cannot reach Redis; routing on this replica's own counts, retrying")
    }
  }

  #once(key: string, level: 'info' | 'warn', obj: object, msg: string): void {
    if (this.#warned.has(key)) return
    if (this.#warned.size < 1024) this.#warned.add(key)
    this.#log[level](obj, msg)
  }

  /** A sink that throws (a router closed by a reload) costs a log line, never the message loop. */
  #guard(sink: SharedLoadSink): SharedLoadSink {
    return {
      setSharedPrefill: (endpoint, instance, blocks) => {
        try {
          sink.setSharedPrefill(endpoint, instance, blocks)
        } catch (err) {
          this.#once(`sink:${endpoint}`, 'warn', { endpoint, err: (err as Error).message }, 'share-load: the shared figure could not be applied')
        }
      },
    }
  }

  /**
   * Stops sharing. `goodbye` (default): tells the others first, so they drop this replica's
   * figures at once rather than after expireMs. The figures heard go to 0 in the sink.
   */
  async close(opts: { goodbye?: boolean } = {}): Promise<void> {
    if (this.#timer === undefined) return
    clearInterval(this.#timer)
    this.#timer = undefined
    await this.#link.close(opts.goodbye === false ? undefined : encodeBye(this.replica, this.#seq++, Date.now()))
    this.#peers.clear()
  }
}
