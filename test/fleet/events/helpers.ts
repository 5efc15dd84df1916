// A hand-driven vLLM publisher for subscriber tests: an XPUB (so the test knows when the
// subscription has arrived: PUB drops what it sends before that) writing exact frames, and a
// ROUTER replay socket whose answers the test controls. Plus a recording KvEventTarget and
// a condition poll bounded by a count of turns, never by elapsed time, and a subscriber of the
// publisher that records what it applies and logs.
import { Router, XPublisher } from 'zeromq'
import { encodeBatch } from '../../../src/fleet/events/codec.js'
import { seqFrame } from '../../../src/fleet/events/frames.js'
import { KvEventSubscriber, type KvEventSubscriberOptions, type KvEventTarget } from '../../../src/fleet/events/subscriber.js'
import type { KvEvent, KvEventBatch, KvEventEncoding } from '../../../src/fleet/events/types.js'

/** Polls `cond` every few ms, at most `turns` times; throws with `what` if it never holds. */
export async function waitFor(cond: () => boolean, what: string, turns = 2000): Promise<void> {
  for (let i = 0; i < turns; i++) {
    if (cond()) return
    await new Promise((r) => setTimeout(r, 5))
  }
  throw new Error(`timed out waiting for ${what}`)
}

export function removed(...hashes: number[]): KvEvent {
  return { type: 'BlockRemoved', blockHashes: hashes.map((h) => BigInt(h)), medium: 'GPU', groupIdx: null }
}

/** gated: answers (from the buffer as it is then) once `open` resolves. */
/** flood: `count` copies of the buffer's first batch and no end marker. */
export type ReplayMode =
  | { kind: 'answer' }
  | { kind: 'silent' }
  | { kind: 'startAt'; seq: number }
  | { kind: 'gated'; open: Promise<void> }
  | { kind: 'flood'; count: number }

export class TestPublisher {
  subscriptions = 0
  replayRequests: bigint[] = []
  replayMode: ReplayMode = { kind: 'answer' }
  /** The topic frame of live messages and of 'topic'-framed replay answers. */
  topic = ''
  /** 'topic': replay answers as vLLM 0.26.0 on frames them, ["", topic, seq, payload] and ["", "", -1, ""]; 'legacy': ["", seq, payload] and ["", -1, ""]. */
  replayFraming: 'topic' | 'legacy' = 'legacy'
  /** Payloads by seq, as a vLLM publisher's replay buffer holds them. */
  readonly buffer = new Map<number, Uint8Array>()

  private constructor(
    readonly pub: XPublisher,
    readonly router: Router | null,
    readonly endpoint: string,
    readonly replayEndpoint: string | undefined,
  ) {
    void (async () => {
      try {
        for await (const [f] of pub) if (f !== undefined && f[0] === 1) this.subscriptions++
      } catch {
        // closed
      }
    })()
    if (router !== null) void this.serve(router)
  }

  /** Binds free ports, or those of `like` (a new process of the same engine). */
  static async open(withReplay: boolean, like?: TestPublisher): Promise<TestPublisher> {
    const pub = new XPublisher({ linger: 0, sendHighWaterMark: 0 }) // never drop: a flood test sends 20,000 at once
    pub.verbosity = 'allSubs'
    await pub.bind(like?.endpoint ?? 'tcp://127.0.0.1:*')
    let router: Router | null = null
    if (withReplay) {
      router = new Router({ linger: 0 })
      await router.bind(like?.replayEndpoint ?? 'tcp://127.0.0.1:*')
    }
    return new TestPublisher(pub, router, pub.lastEndpoint!, router?.lastEndpoint ?? undefined)
  }

  /** Encodes and stores batch `seq`; sends it live unless `live` is false (a lost message). */
  async batch(seq: number, events: KvEvent[], o: { live?: boolean; encoding?: KvEventEncoding; ts?: number } = {}): Promise<void> {
    const b: KvEventBatch = { ts: o.ts ?? 1000 + seq, events, dataParallelRank: 0 }
    const payload = encodeBatch(b, o.encoding ?? 'map')
    this.buffer.set(seq, payload)
    if (o.live !== false) await this.pub.send([this.topic, seqFrame(seq), payload])
  }

  async raw(frames: (Buffer | Uint8Array | string)[]): Promise<void> {
    await this.pub.send(frames)
  }

  close(): void {
    this.pub.close()
    this.router?.close()
  }

  private async serve(router: Router): Promise<void> {
    try {
      for await (const msg of router) {
        const [id, , start] = msg as [Buffer, Buffer, Buffer]
        const from = start.readBigInt64BE(0)
        this.replayRequests.push(from)
        const mode = this.replayMode
        if (mode.kind === 'silent') continue
        if (mode.kind === 'gated') await mode.open
        if (mode.kind === 'flood') {
          const [seq, payload] = [...this.buffer.entries()][0]!
          for (let i = 0; i < mode.count; i++) await router.send([id, '', seqFrame(seq), payload])
          continue
        }
        const first = mode.kind === 'startAt' ? BigInt(mode.seq) : from
        const topic = this.replayFraming === 'topic'
        for (const seq of [...this.buffer.keys()].sort((a, b) => a - b)) {
          if (BigInt(seq) < first) continue
          const payload = this.buffer.get(seq)!
          await router.send(topic ? [id, '', this.topic, seqFrame(seq), payload] : [id, '', seqFrame(seq), payload])
        }
        await router.send(topic ? [id, '', '', seqFrame(-1), ''] : [id, '', seqFrame(-1), ''])
      }
    } catch {
      // closed
    }
  }
}

export interface Call {
  kind: 'batch' | 'reset' | 'stale' | 'rebuilding' | 'rebuilt'
  seq?: bigint
  why?: string
  stale?: boolean
  hashes?: bigint[]
}

/** Records every call, in order, with the batch's removed hashes as its identity. */
export class RecordingTarget implements KvEventTarget {
  readonly calls: Call[] = []
  batch(_instance: string, batch: KvEventBatch, seq: bigint): void {
    const hashes = batch.events.flatMap((e) => (e.type === 'AllBlocksCleared' ? [] : (e.blockHashes as bigint[])))
    this.calls.push({ kind: 'batch', seq, hashes })
  }
  reset(_instance: string, why: 'restart' | 'gap' | 'connect'): void {
    this.calls.push({ kind: 'reset', why })
  }
  stale(_instance: string, stale: boolean, why: string): void {
    this.calls.push({ kind: 'stale', stale, why })
  }
  rebuilding(_instance: string, from: bigint): void {
    this.calls.push({ kind: 'rebuilding', seq: from })
  }
  rebuilt(_instance: string, from: bigint): void {
    this.calls.push({ kind: 'rebuilt', seq: from })
  }
  get seqs(): bigint[] {
    return this.calls.filter((c) => c.kind === 'batch').map((c) => c.seq!)
  }
  count(kind: Call['kind']): number {
    return this.calls.filter((c) => c.kind === kind).length
  }
}

export interface SubscriberLog {
  level: string
  msg: string
  fields?: object
}

/**
 * A started subscriber of `pub` (its replay socket too, if it has one) recording what it applies
 * and logs, pushed onto `open` for closing; resolves once its subscription reached the publisher.
 */
export async function subscribeTo(pub: TestPublisher, opts: Partial<KvEventSubscriberOptions>, open: { close(): unknown }[]): Promise<{ sub: KvEventSubscriber; target: RecordingTarget; logs: SubscriberLog[] }> {
  const target = new RecordingTarget()
  const logs: SubscriberLog[] = []
  const sub = new KvEventSubscriber({
    instance: 'engine-a',
    endpoint: pub.endpoint,
    ...(pub.replayEndpoint !== undefined ? { replayEndpoint: pub.replayEndpoint } : {}),
    target,
    log: (level, msg, fields) => logs.push({ level, msg, ...(fields !== undefined ? { fields } : {}) }),
    ...opts,
  })
  open.push(sub)
  sub.start()
  await waitFor(() => pub.subscriptions > 0, 'the subscription to reach the publisher')
  return { sub, target, logs }
}
