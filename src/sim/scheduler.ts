// Continuous batching, one step at a time, after vLLM v1's scheduler: at most maxNumSeqs
// running sequences; each step spends a budget of maxNumBatchedTokens on one token per
// decoding sequence first, then on chunked prefill of running sequences' uncached prompt
// tokens, then admits waiting sequences (FCFS) while blocks and budget last. When a
// decoding sequence needs a block and none is free, the most recently admitted sequence is
// preempted (its blocks freed; it recomputes later, mostly from cache), as vLLM does.
// The scheduler knows no time source: the engine calls plan(t) and commit(t).
//
// A decode leg (its KV computed by a prefill instance) is admitted like any request: its
// prompt's blocks are allocated (local cache hits reduce what it must pull), but it then
// leaves the queue without taking any of the step's budget and waits, in `remote`, for its
// KV (vLLM's WAITING_FOR_REMOTE_KVS). When the KV lands, its blocks are cached and it goes
// back to the head of the queue with all but the last prompt token computed (vLLM computes
// the last one to sample), so it enters the batch at the cost of one token.
import type { KvCache } from './kv-cache.js'
import type { KvEventLog } from './kv-event-log.js'
import type { Sequence } from './sequence.js'
import type { EngineStats } from './stats.js'

export interface SchedulerLimits {
  blockSize: number
  maxNumSeqs: number
  maxNumBatchedTokens: number
}

export class Scheduler {
  /** Submitted, not yet through the API server's overhead; sorted by readyAt. */
  readonly pending: Sequence[] = []
  readonly waiting: Sequence[] = []
  private waitingHead = 0
  /** Decode legs whose blocks are allocated, waiting for their KV. */
  readonly remote: Sequence[] = []
  /** Decode legs admitted by the last plan(): the engine starts their pulls. */
  readonly pulls: Sequence[] = []
  running: Sequence[] = []
  /** The sequences in the step being computed, and what the step carries. */
  readonly step: Sequence[] = []
  prefillTokens = 0
  decodeSeqs = 0
  contextTokens = 0
  private readonly found = { hits: 0, freeHits: 0 }
  /** Where newly cached blocks are reported, when the engine publishes KV events. */
  events: KvEventLog | null = null

  constructor(
    private readonly cache: KvCache,
    private readonly limits: SchedulerLimits,
    private readonly stats: EngineStats,
  ) {}

  /** Queued requests, those waiting for their KV included (vLLM counts them as waiting). */
  get numWaiting(): number {
    return this.waiting.length - this.waitingHead + this.remote.length
  }

  addPending(seq: Sequence): void {
    const p = this.pending
    let i = p.length
    while (i > 0 && p[i - 1]!.readyAt > seq.readyAt) i--
    if (i === p.length) p.push(seq)
    else p.splice(i, 0, seq)
  }

  /** Removes a sequence wherever it is and unpins its blocks. */
  remove(seq: Sequence): void {
    if (seq.state === 'pending') removeFrom(this.pending, seq, 0)
    else if (seq.state === 'waiting') {
      const i = this.waiting.indexOf(seq, this.waitingHead)
      if (i >= 0) this.waiting.splice(i, 1)
    } else if (seq.state === 'running') removeFrom(this.running, seq, 0)
    else if (seq.state === 'remote') removeFrom(this.remote, seq, 0)
    this.cache.release(seq.slots)
    seq.slots.length = 0
  }

  /** Builds the step starting at `t`; false if there is nothing to compute. */
  plan(t: number): boolean {
    const { blockSize: bs, maxNumSeqs } = this.limits
    const step = this.step
    step.length = 0
    let budget = this.limits.maxNumBatchedTokens
    let prefill = 0
    let decodes = 0
    let context = 0

    const pending = this.pending
    let ready = 0
    while (ready < pending.length && pending[ready]!.readyAt <= t) {
      const seq = pending[ready++]!
      seq.state = 'waiting'
      this.waiting.push(seq)
    }
    if (ready > 0) pending.splice(0, ready)

    const running = this.running
    for (let i = 0; i < running.length && budget > 0; i++) {
      const seq = running[i]!
      if (seq.numComputed < seq.prefillTarget) continue
      const kvTokens = seq.promptTokens + seq.generated
      if (seq.slots.length * bs < kvTokens && !this.growOrPreempt(seq)) break
      seq.chunk = 0
      step.push(seq)
      decodes++
      budget--
      context += kvTokens - 1
    }
    // The next prefill chunk of `seq`: as much of what is left of its prompt as the budget allows.
    const takeChunk = (seq: Sequence): void => {
      const left = seq.prefillTarget - seq.numComputed
      const n = left < budget ? left : budget
      seq.chunk = n
      step.push(seq)
      prefill += n
      budget -= n
      context += seq.numComputed
    }
    for (let i = 0; i < running.length && budget > 0; i++) {
      const seq = running[i]!
      if (seq.prefillTarget - seq.numComputed > 0) takeChunk(seq)
    }
    const waiting = this.waiting
    while (budget > 0 && running.length < maxNumSeqs && this.waitingHead < waiting.length) {
      const seq = waiting[this.waitingHead]!
      if (seq.kvReady) {
        // A decode leg whose KV arrived: its blocks are in place, one token is left to compute.
        seq.kvReady = false
        this.waitingHead++
        seq.state = 'running'
        running.push(seq)
        takeChunk(seq)
        continue
      }
      // vLLM always computes the prompt's last token (it needs its logits), so a fully
      // cached prompt still hits at most its first (n - 1) tokens, rounded down to blocks.
      const limit = Math.floor((seq.prefillTarget - 1) / bs)
      this.cache.lookup(seq.blockKeys, limit, this.found)
      const { hits, freeHits } = this.found
      const need = Math.ceil(seq.prefillTarget / bs) - hits
      if (this.cache.freeBlocks - freeHits < need) break
      this.cache.acquire(hits, seq.slots)
      this.cache.allocate(need, seq.slots)
      this.waitingHead++
      if (seq.remote !== null) {
        this.admitRemote(seq, hits, t)
        continue
      }
      seq.state = 'running'
      running.push(seq)
      if (seq.scheduledAt < 0) {
        seq.scheduledAt = t
        seq.cachedTokens = hits * bs
        this.stats.prefixQueries += seq.promptTokens
        this.stats.prefixHits += hits * bs
        this.stats.queue.observe((t - seq.readyAt) / 1000)
      }
      seq.numComputed = hits * bs
      seq.registered = hits
      takeChunk(seq)
    }
    if (this.waitingHead > 1024 || this.waitingHead === waiting.length) {
      waiting.splice(0, this.waitingHead)
      this.waitingHead = 0
    }
    this.prefillTokens = prefill
    this.decodeSeqs = decodes
    this.contextTokens = context
    return step.length > 0
  }

  /**
   * Applies the step that ended at `t`: prefill progress (registering newly computed full
   * blocks), one token per sequence that decoded or finished its prefill, finishes.
   * Finished sequences are appended to `finished` for the engine to report.
   */
  commit(t: number, finished: Sequence[]): void {
    const bs = this.limits.blockSize
    const stats = this.stats
    const step = this.step
    for (let i = 0; i < step.length; i++) {
      const seq = step[i]!
      if (seq.state !== 'running') continue // aborted while the step ran
      if (seq.chunk > 0) {
        seq.numComputed += seq.chunk
        stats.computedTokens += seq.chunk
        const keys = seq.blockKeys
        let full = Math.floor(seq.numComputed / bs)
        if (full > keys.length) full = keys.length
        const events = this.events
        for (let b = seq.registered; b < full; b++) {
          if (this.cache.register(seq.slots[b]!, keys[b]!) && events !== null) events.stored(seq, b)
        }
        if (full > seq.registered) seq.registered = full
        if (seq.numComputed < seq.prefillTarget) continue
      }
      seq.generated++
      stats.generationTokens++
      if (seq.firstTokenAt < 0) {
        seq.firstTokenAt = t
        stats.promptTokens += seq.promptTokens
        stats.ttft.observe((t - seq.arrivalAt) / 1000)
      }
      if (seq.onTokens !== null) seq.onTokens(seq, 1, t)
      if (seq.generated >= seq.maxTokens && seq.state === 'running') {
        seq.state = 'finished'
        seq.finishReason = seq.request.finishReason ?? 'length'
        seq.finishedAt = t
        // A prefill leg keeps its blocks: the engine hands them to its holds.
        if (seq.holdId === null) {
          this.cache.release(seq.slots)
          seq.slots.length = 0
        }
        finished.push(seq)
      }
    }
    if (finished.length > 0) this.running = this.running.filter((s) => s.state === 'running')
  }

  /** A decode leg got its blocks: out of the queue until its KV arrives (landRemote). */
  private admitRemote(seq: Sequence, hits: number, t: number): void {
    const bs = this.limits.blockSize
    seq.state = 'remote'
    this.remote.push(seq)
    this.pulls.push(seq)
    seq.localHitTokens = hits * bs
    seq.pulledTokens = seq.promptTokens - hits * bs
    this.stats.externalQueries += seq.pulledTokens
    seq.numComputed = hits * bs
    seq.registered = hits
    if (seq.scheduledAt < 0) {
      seq.scheduledAt = t
      seq.cachedTokens = hits * bs
      this.stats.prefixQueries += seq.promptTokens
      this.stats.prefixHits += hits * bs
      this.stats.queue.observe((t - seq.readyAt) / 1000)
    }
  }

  /**
   * A decode leg's KV arrived: its full prompt blocks become cached (BlockStored, as vLLM
   * caches received blocks) and it goes back to the head of the queue with all but the last
   * prompt token computed.
   */
  landRemote(seq: Sequence): void {
    const bs = this.limits.blockSize
    removeFrom(this.remote, seq, 0)
    const keys = seq.blockKeys
    let full = Math.floor((seq.promptTokens - 1) / bs)
    if (full > keys.length) full = keys.length
    const events = this.events
    for (let b = seq.registered; b < full; b++) {
      if (this.cache.register(seq.slots[b]!, keys[b]!) && events !== null) events.stored(seq, b)
    }
    if (full > seq.registered) seq.registered = full
    seq.numComputed = seq.promptTokens - 1
    seq.cachedTokens = seq.localHitTokens + seq.pulledTokens
    seq.remote = null
    seq.kvReady = true
    this.requeue(seq)
  }

  /** A decode leg's KV cannot be had (policy recompute): it is queued again to prefill here. */
  recomputeRemote(seq: Sequence): void {
    removeFrom(this.remote, seq, 0)
    this.cache.release(seq.slots)
    seq.slots.length = 0
    seq.remote = null
    seq.recomputed = true
    seq.numComputed = 0
    seq.registered = 0
    this.requeue(seq)
  }

  /** Back to the head of the queue, as vLLM prepends requests it skipped or preempted. */
  private requeue(seq: Sequence): void {
    seq.state = 'waiting'
    if (this.waitingHead > 0) this.waiting[--this.waitingHead] = seq
    else this.waiting.unshift(seq)
  }

  /** Gets `seq` one more block, preempting from the tail of the running list; false if `seq` itself was preempted. */
  private growOrPreempt(seq: Sequence): boolean {
    while (!this.cache.allocate(1, seq.slots)) {
      const victim = this.running[this.running.length - 1]!
      this.preempt(victim)
      if (victim === seq) return false
    }
    return true
  }

  private preempt(seq: Sequence): void {
    this.running.pop()
    this.cache.release(seq.slots)
    seq.slots.length = 0
    seq.numComputed = 0
    seq.registered = 0
    seq.prefillTarget = seq.promptTokens + seq.generated
    seq.preemptions++
    this.stats.preemptions++
    this.requeue(seq)
  }
}

function removeFrom(list: Sequence[], seq: Sequence, from: number): void {
  const i = list.indexOf(seq, from)
  if (i >= 0) list.splice(i, 1)
}
