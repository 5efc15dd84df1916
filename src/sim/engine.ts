// One simulated vLLM instance: prefix cache + scheduler + latency model, driven by a Clock.
// Live workers run it on a RealClock behind HTTP; the virtual fleet runs many on one
// VirtualClock. This class is the whole model: nothing about it differs between the two.
import { randomUUID } from 'node:crypto'
import type { KvEvent } from '../fleet/events/types.js'
import type { Clock, TimerHandle } from './clock.js'
import { KvCache } from './kv-cache.js'
import { KvEventLog } from './kv-event-log.js'
import { KvHolds } from './kv-holds.js'
import { transferMs, type KvTransferConfig, type PullRefusal, type RemoteKvSource } from './kv-transfer.js'
import { LatencyModel } from './latency-model.js'
import { kvTransferConfig, type Profile } from './profiles.js'
import { Scheduler } from './scheduler.js'
import { Sequence, type EngineRequest, type SeqListener } from './sequence.js'
import { EngineStats } from './stats.js'

export interface EngineConfig {
  kvBlocks: number
  blockSize: number
  maxNumSeqs: number
  maxNumBatchedTokens: number
  /** Longest prompt + output accepted; at most kvBlocks * blockSize. */
  maxModelLen: number
  latency: LatencyModel
  /** Prefill/decode disaggregation: transfer time, leases, what a failed load does. */
  kv: KvTransferConfig
}

/** Engine configuration from a profile with overrides. */
export function engineConfig(
  profile: Profile,
  o: Partial<Omit<EngineConfig, 'latency' | 'kv'>> = {},
  kv: Partial<KvTransferConfig> = {},
): EngineConfig {
  const kvBlocks = o.kvBlocks ?? profile.kvBlocks
  const blockSize = o.blockSize ?? profile.blockSize
  return {
    kvBlocks,
    blockSize,
    maxNumSeqs: o.maxNumSeqs ?? profile.maxNumSeqs,
    maxNumBatchedTokens: o.maxNumBatchedTokens ?? profile.maxNumBatchedTokens,
    maxModelLen: Math.min(o.maxModelLen ?? profile.maxModelLen, kvBlocks * blockSize),
    latency: new LatencyModel(profile.latency),
    kv: { ...kvTransferConfig(profile), ...kv },
  }
}

/** Receives an engine's KV events: one call per step that produced any, at simulated `atMs`. */
export type KvEventListener = (events: KvEvent[], atMs: number) => void

export class SimEngine {
  readonly cache: KvCache
  readonly stats = new EngineStats()
  /** Prefill legs' blocks held for their decode legs. */
  readonly holds: KvHolds
  /** vLLM's engine_id (remote_engine_id in kv_transfer_params): a new one for every process, so restart() changes it. */
  kvEngineId = randomUUID()
  private readonly scheduler: Scheduler
  private readonly finished: Sequence[] = []
  private nextId = 0
  private busy = false
  private stepTimer: TimerHandle | null = null
  private wake: TimerHandle | null = null
  private closed = false
  private kvLog: KvEventLog | null = null
  private kvListener: KvEventListener | null = null

  constructor(
    readonly id: string,
    readonly clock: Clock,
    readonly config: EngineConfig,
  ) {
    this.cache = new KvCache(config.kvBlocks)
    this.scheduler = new Scheduler(this.cache, config, this.stats)
    this.holds = new KvHolds(this.cache, clock, this.stats)
  }

  get numRunning(): number {
    return this.scheduler.running.length
  }

  get numWaiting(): number {
    return this.scheduler.numWaiting
  }

  /** Submitted requests still in the API server's overhead window. */
  get numPending(): number {
    return this.scheduler.pending.length
  }

  /** Requests in the engine that have not finished. */
  get inFlight(): number {
    return this.scheduler.pending.length + this.scheduler.numWaiting + this.scheduler.running.length
  }

  /** Decode legs whose blocks are allocated and whose KV has not arrived yet. */
  get numPulling(): number {
    return this.scheduler.remote.length
  }

  /** True while a KV event listener is set: requests should then carry their token ids. */
  get kvEventsEnabled(): boolean {
    return this.kvListener !== null
  }

  /**
   * Publishes the prefix cache's events (vLLM's BlockStored, BlockRemoved, AllBlocksCleared)
   * to `fn`, the events of a step in one call at its end; null stops them. BlockStored
   * carries token ids only for requests submitted with `tokenIds`.
   */
  setKvEventListener(fn: KvEventListener | null): void {
    this.kvListener = fn
    if (fn === null) {
      this.kvLog = null
      this.scheduler.events = null
      this.cache.onEvict = null
      return
    }
    const log = (this.kvLog ??= new KvEventLog(this.config.blockSize))
    this.scheduler.events = log
    this.cache.onEvict = (key) => log.removed(key)
  }

  /**
   * vLLM's reset_prefix_cache: forgets every cached block (AllBlocksCleared) when no
   * request holds any; false (nothing done) otherwise, as vLLM refuses then.
   */
  resetPrefixCache(): boolean {
    if (this.closed || this.cache.usedBlocks > 0) return false
    this.cache.clear()
    this.kvLog?.cleared()
    this.flushKv(this.clock.now())
    return true
  }

  /**
   * The engine process restarts: everything in flight is aborted and the cache starts
   * empty. No event says so (a new vLLM process just starts over); events not yet
   * delivered are lost with the old process.
   */
  restart(): void {
    if (this.closed) return
    this.abortAll()
    this.holds.clear(this.clock.now())
    this.kvLog?.discard()
    this.cache.clear()
    this.kvEngineId = randomUUID()
  }

  /** Why this request cannot be served (vLLM's wording), or undefined. */
  check(promptTokens: number, maxTokens: number): string | undefined {
    const max = this.config.maxModelLen
    if (promptTokens + maxTokens > max) {
      return (
        `This model's maximum context length is ${max} tokens. However, you requested ` +
        `${promptTokens + maxTokens} tokens (${promptTokens} in the messages, ${maxTokens} in the completion). ` +
        'Please reduce the length of the messages or completion.'
      )
    }
    if (promptTokens < 1) return 'The prompt must contain at least one token.'
    if (maxTokens < 1) return 'max_tokens must be at least 1.'
    return undefined
  }

  submit(request: EngineRequest, listener?: SeqListener): Sequence {
    if (this.closed) throw new Error(`engine ${this.id} is closed`)
    const problem = this.check(request.promptTokens, request.maxTokens)
    if (problem !== undefined) throw new RangeError(problem)
    const now = this.clock.now()
    if (request.holdKv !== undefined && this.holds.get(request.holdKv.id) !== undefined) {
      throw new RangeError(`KV blocks are already held under ${request.holdKv.id}`)
    }
    const seq = new Sequence(this.nextId++, request, listener, now)
    seq.readyAt = now + this.config.latency.overheadMs(request.promptTokens) + (request.extraDelayMs ?? 0)
    this.scheduler.addPending(seq)
    seq.remote?.attach()
    if (!this.busy) this.wakeAt(seq.readyAt)
    return seq
  }

  /** Drops a sequence (client gone): out of the batch at once, its blocks unpinned. */
  abort(seq: Sequence): void {
    if (seq.state === 'finished') return
    this.dropRemote(seq)
    this.scheduler.remove(seq)
    seq.state = 'finished'
    seq.finishReason = 'abort'
    seq.finishedAt = this.clock.now()
    this.stats.success.abort++
    seq.listener?.onFinish?.(seq, seq.finishedAt)
  }

  /** Stops the loop and aborts everything in flight. */
  close(): void {
    if (this.closed) return
    this.closed = true
    if (this.stepTimer !== null) this.clock.cancel(this.stepTimer)
    if (this.wake !== null) this.clock.cancel(this.wake)
    this.abortAll()
    this.holds.clear(this.clock.now())
  }

  /** The sequence leaves before its KV arrived: the prefill side may free its blocks. */
  private dropRemote(seq: Sequence): void {
    const src = seq.remote
    if (src === null) return
    seq.remote = null
    if (seq.kvTimer !== null) this.clock.cancel(seq.kvTimer)
    seq.kvTimer = null
    src.cancel()
  }

  /** Asks the prefill side for a decode leg's KV, its blocks being allocated. */
  private beginPull(seq: Sequence): void {
    const src = seq.remote!
    let answered = false
    src.begin(seq.pulledTokens, (refusal) => {
      if (answered) return
      answered = true
      // A source may answer inside begin(), that is inside plan(): handle it on the clock.
      this.clock.schedule(this.clock.now(), (at) => this.pullAnswered(seq, src, refusal, at))
    })
  }

  private pullAnswered(seq: Sequence, src: RemoteKvSource, refusal: PullRefusal | null, at: number): void {
    if (this.closed || seq.state !== 'remote' || seq.remote !== src) return
    if (refusal === null) {
      seq.pullStartedAt = at
      seq.kvTimer = this.clock.schedule(at + transferMs(this.config.kv, seq.pulledTokens), (t) => this.kvArrived(seq, src, t))
      return
    }
    this.stats.kvTransferFailures++
    seq.remote = null // a refused source is done: nothing more is called on it
    if (this.config.kv.loadFailurePolicy === 'recompute') {
      this.scheduler.recomputeRemote(seq)
      if (!this.busy) this.wakeAt(at)
      return
    }
    this.finishError(seq, at, `KV transfer failed: ${refusal}`)
  }

  private kvArrived(seq: Sequence, src: RemoteKvSource, t: number): void {
    seq.kvTimer = null
    if (this.closed || seq.state !== 'remote' || seq.remote !== src) return
    src.finish()
    const s = this.stats
    const bytes = seq.pulledTokens * this.config.kv.bytesPerToken
    s.kvTransfers++
    s.kvTransferBytes += bytes
    s.externalTokens += seq.pulledTokens
    s.xferTime.observe((t - seq.pullStartedAt) / 1000)
    s.xferBytes.observe(bytes)
    seq.kvArrivedAt = t
    this.scheduler.landRemote(seq)
    if (!this.busy) this.wakeAt(t)
  }

  /** vLLM's FINISHED_ERROR: the request ends with finish reason `error` (its API server answers 500). */
  private finishError(seq: Sequence, t: number, message: string): void {
    this.scheduler.remove(seq)
    seq.state = 'finished'
    seq.finishReason = 'error'
    seq.error = message
    seq.finishedAt = t
    this.stats.success.error++
    seq.listener?.onFinish?.(seq, t)
  }

  private abortAll(): void {
    const s = this.scheduler
    for (const seq of [...s.pending, ...s.waiting.slice(), ...s.running]) if (seq.state !== 'finished') this.abort(seq)
  }

  private flushKv(t: number): void {
    const log = this.kvLog
    if (log === null || log.size === 0) return
    this.kvListener!(log.take(), t)
  }

  private wakeAt(at: number): void {
    if (this.wake !== null) {
      if (this.wake.at <= at) return
      this.clock.cancel(this.wake)
    }
    this.wake = this.clock.schedule(at, this.onWake)
  }

  private readonly onWake = (at: number): void => {
    this.wake = null
    if (!this.busy && !this.closed) {
      this.startStep(at)
      this.flushKv(at) // admissions may have evicted blocks
    }
  }

  private startStep(t: number): void {
    const s = this.scheduler
    const planned = s.plan(t)
    if (s.pulls.length > 0) {
      for (const seq of s.pulls) this.beginPull(seq)
      s.pulls.length = 0
    }
    if (!planned) {
      this.busy = false
      const next = s.pending[0]
      if (next !== undefined) this.wakeAt(next.readyAt)
      return
    }
    this.busy = true
    const d = this.config.latency.stepMs(s.prefillTokens, s.decodeSeqs, s.contextTokens)
    this.stepTimer = this.clock.schedule(t + d, this.onStepEnd)
  }

  private readonly onStepEnd = (t: number): void => {
    this.stepTimer = null
    if (this.closed) return
    this.stats.steps++
    const finished = this.finished
    this.scheduler.commit(t, finished)
    for (let i = 0; i < finished.length; i++) {
      const seq = finished[i]!
      this.stats.success[seq.finishReason as 'stop' | 'length']++
      this.stats.e2e.observe((t - seq.arrivalAt) / 1000)
      if (seq.holdId !== null) {
        const lease = seq.request.holdKv!.leaseMs ?? this.config.kv.leaseMs
        seq.hold = this.holds.add(seq.holdId, seq, seq.slots.splice(0), lease, t)
      }
      seq.listener?.onFinish?.(seq, t)
    }
    finished.length = 0
    this.startStep(t)
    this.flushKv(t) // this step's stored blocks, then the next one's evictions
  }
}
