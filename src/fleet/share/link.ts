// The two Redis connections of a sharing replica: one publishes, one subscribes (a connection
// in subscribe mode takes no other command). Both reconnect on their own, with the client's
// backoff (50 ms doubling to 2 s, plus jitter), for as long as the replica runs: nothing here
// ever waits for Redis or throws because of it. What the replica sees is one state,
// connected (both up and subscribed) or not, and each change of it once, with the reason.
//
// Loaded only when --share-load is given: the client takes some 120 ms to load.
import { createClient } from '@redis/client'

export interface LinkEvents {
  /** A message on the channel, as sent. */
  message(text: string): void
  /**
   * Connected (true) or not, with why not; called on each change only, and on the first
   * failure to connect at start (before which the link is neither).
   */
  state(connected: boolean, reason: string | undefined): void
}

export interface LinkOptions {
  url: string
  channel: string
  /** CLIENT SETNAME, so that operators can tell the replicas apart in CLIENT LIST. */
  clientName: string
  /** A PUBLISH unanswered this long means the connection is dead, whatever the socket says. */
  answerTimeoutMs: number
}

type Client = ReturnType<typeof createClient>

const reasonOf = (err: unknown): string => (err instanceof Error ? err.message : String(err)) || 'connection closed'

export class RedisLink {
  readonly #opts: LinkOptions
  readonly #events: LinkEvents
  readonly #pub: Client
  readonly #sub: Client
  #subscribed = false
  /** Undefined until the first connection or the first failure. */
  #connected: boolean | undefined
  #closed = false
  /** The latest error either connection reported: the reason given when the state changes. */
  #reason: string | undefined
  /** performance.now() when the PUBLISH still unanswered was sent; undefined when none is. */
  #pendingSince: number | undefined

  constructor(opts: LinkOptions, events: LinkEvents) {
    this.#opts = opts
    this.#events = events
    // A PUBLISH while disconnected fails at once rather than wait in the offline queue: by the
    // time the connection is back it would be stale, and the next interval sends the latest.
    this.#pub = createClient({ url: opts.url, name: opts.clientName, disableOfflineQueue: true })
    this.#sub = createClient({ url: opts.url, name: opts.clientName })
    for (const c of [this.#pub, this.#sub]) {
      c.on('error', (err: unknown) => {
        this.#reason = reasonOf(err)
        this.#update()
      })
      for (const e of ['ready', 'end', 'reconnecting']) c.on(e, () => this.#update())
    }
  }

  /** Starts connecting, in the background; returns at once. */
  start(): void {
    // connect() settles once connected; it rejects only if the client is closed meanwhile.
    for (const c of [this.#pub, this.#sub]) c.connect().catch(() => undefined)
    // Queued until the subscriber is connected; the client subscribes again after each reconnect.
    this.#sub
      .subscribe(this.#opts.channel, (text: string) => {
        if (!this.#closed) this.#events.message(text)
      })
      .then(
        () => {
          this.#subscribed = true
          this.#update()
        },
        (err: unknown) => {
          if (this.#closed) return
          this.#reason = `SUBSCRIBE failed: ${reasonOf(err)}`
          this.#update()
        },
      )
  }

  get connected(): boolean {
    return this.#connected === true
  }

  /**
   * Publishes `text` when connected and no earlier PUBLISH is still unanswered (so a stalled
   * connection holds one message, not a queue of them). Resolves true once Redis took it;
   * undefined when it was not sent.
   */
  publish(text: string, now: number): Promise<boolean> | undefined {
    if (this.#pendingSince !== undefined) {
      if (this.#connected && now - this.#pendingSince > this.#opts.answerTimeoutMs) {
        this.#reason = `no answer from Redis to PUBLISH in ${this.#opts.answerTimeoutMs} ms`
        this.#update()
      }
      return undefined
    }
    if (this.#connected !== true) return undefined
    this.#pendingSince = now
    return this.#pub.publish(this.#opts.channel, text).then(
      () => {
        this.#pendingSince = undefined
        this.#update()
        return true
      },
      (err: unknown) => {
        this.#pendingSince = undefined
        this.#reason = `PUBLISH failed: ${reasonOf(err)}`
        this.#update()
        return false
      },
    )
  }

  #update(): void {
    if (this.#closed) return
    const stalled = this.#pendingSince !== undefined && performance.now() - this.#pendingSince > this.#opts.answerTimeoutMs
    const up = this.#pub.isReady && this.#sub.isReady && this.#subscribed && !stalled
    if (up === this.#connected) return
    // Still connecting at start, and nothing failed yet: no state to report.
    if (!up && this.#connected === undefined && this.#reason === undefined) return
    this.#connected = up
    this.#events.state(up, up ? undefined : (this.#reason ?? 'connection closed'))
    if (up) this.#reason = undefined
  }

  /** Sends `last` (a goodbye) if connected, within a short wait, then closes both connections. */
  async close(last?: string): Promise<void> {
    if (this.#closed) return
    const wasUp = this.#connected === true
    this.#closed = true
    if (last !== undefined && wasUp && this.#pendingSince === undefined) {
      let timer: NodeJS.Timeout | undefined
      await Promise.race([
        this.#pub.publish(this.#opts.channel, last).catch(() => undefined),
        new Promise<void>((r) => (timer = setTimeout(r, 500))),
      ])
      clearTimeout(timer)
    }
    this.#pub.destroy()
    this.#sub.destroy()
  }
}
