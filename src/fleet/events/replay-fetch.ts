// A replay from the engine's buffer: a DEALER socket asks its ROUTER for the batches from a
// sequence number on, and collects them undecoded until the end marker, within the
// subscriber's bounds (a timeout, a count of batches and of bytes), in turns of the event loop.
import type { Dealer } from 'zeromq'
import type { DecodedBatch } from './codec.js'
import { readReplayAnswer, seqFrame } from './frames.js'
import {
  BYTES_PER_TURN,
  DEFAULT_MAX_PER_TURN,
  DEFAULT_MAX_REPLAY_BATCHES,
  DEFAULT_MAX_REPLAY_BYTES,
  DEFAULT_REPLAY_TIMEOUT_MS,
  type KvEventSubscriberOptions,
} from './subscriber-options.js'
import { zeromq } from './zeromq.js'

/** One batch, live or replayed, as the subscriber holds it. */
export interface Pending {
  seq: bigint
  /** The payload until it is decoded (a replay's answers wait undecoded: they are smaller so). */
  payload: Uint8Array | null
  /** undefined: not decoded yet; null: the payload could not be decoded, so the batch's content is lost. */
  batch: DecodedBatch | null | undefined
}

export interface Replayed {
  batches: Pending[]
  answered: boolean
  failure: string
}

/** What a replay reports to the subscriber that asked for it. */
export interface ReplayHost {
  /** The replay's socket, open (the subscriber closes it if it is closed meanwhile), then done. */
  opened(dealer: Dealer): void
  done(dealer: Dealer): void
  closed(): boolean
  /** An answer that is not one: counted and dropped. */
  bad(what: string): void
  warn(msg: string, fields: object): void
}

export const turn = (): Promise<void> => new Promise((r) => setImmediate(r))

/**
 * The batches replayed from `from` on, in order, undecoded; answered: the end marker came
 * (else the replay failed, and `failure` says how: timed out, overflowed its bounds, or
 * lost its connection; what came before is kept).
 */
export async function fetchReplay(o: KvEventSubscriberOptions, from: bigint, maxMessageBytes: number, host: ReplayHost): Promise<Replayed> {
  const timeout = o.replayTimeoutMs ?? DEFAULT_REPLAY_TIMEOUT_MS
  const maxBatches = o.maxReplayBatches ?? DEFAULT_MAX_REPLAY_BATCHES
  const maxBytes = o.maxReplayBytes ?? DEFAULT_MAX_REPLAY_BYTES
  const deadline = Date.now() + timeout
  const out: Pending[] = []
  let answered = false
  let failure = ''
  let bytes = 0
  let inTurn = 0
  let turnBytes = 0
  const perTurn = o.maxBatchesPerTurn ?? DEFAULT_MAX_PER_TURN
  const dealer = new (zeromq().Dealer)({ linger: 0, maxMessageSize: maxMessageBytes, ipv6: /^tcp:\/\/\[/.test(o.replayEndpoint!) })
  host.opened(dealer)
  let lostConnection = false
  // The answer cannot survive its connection (a dropped one is an oversized answer, or the
  // engine gone): fail now rather than at the timeout.
  dealer.events.on('disconnect', () => {
    lostConnection = true
    dealer.close()
  })
  try {
    dealer.connect(o.replayEndpoint!)
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
        host.bad(a.what)
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
    if (!host.closed()) host.warn(`kv events: ${o.instance} replay from ${from} failed: ${failure}`, { instance: o.instance })
  } finally {
    dealer.close()
    host.done(dealer)
  }
  out.sort((a, b) => (a.seq < b.seq ? -1 : a.seq > b.seq ? 1 : 0))
  return { batches: out, answered, failure }
}
