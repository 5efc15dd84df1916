// N engines on one VirtualClock: the live workers' model with no sockets and no waiting,
// so hours of traffic over dozens of instances replay in seconds. Requests arrive at
// simulated times; each result carries what a client of a live worker would have seen.
//
// Prefill/decode disaggregation runs here too: submitPrefill + submitDecode are vLLM's
// NixlConnector flow (the decode leg starts once the prefill leg answered), submitBootstrap
// is SGLang's (both legs at once). The decode engine pulls the prefill engine's held blocks
// after the transfer time, on the same clock, while both engines carry on with other work.
import { VirtualClock } from './clock.js'
import { cacheSeed, type PreparedPrompt } from './block-hash.js'
import { resolveSim, type ResolvedSim, type SimOptions } from './config.js'
import { SimEngine } from './engine.js'
import { readKvLeg, type KvTransferParams } from './kv-params.js'
import type { RemoteKvSource } from './kv-transfer.js'
import { renderMetrics } from './metrics.js'
import { ModelRegistry } from './models.js'
import type { PromptSource } from '../tokens/builtin-ids.js'
import { outputPlan, preparePromptSource } from './request.js'
import type { EngineRequest, Sequence, SeqListener } from './sequence.js'
import { getTokenizer, type Tokenizer } from './tokenizers/index.js'
import { HoldSource, legsOf, PrefillHandle, Room, RoomSource, type PdResultExtra } from './virtual-pd.js'

export { PrefillHandle, type PdLegs, type PrefillState } from './virtual-pd.js'

export interface VirtualFleetOptions extends SimOptions {
  /** Number of instances (ids "sim-0"...) or their ids. */
  instances: number | readonly string[]
  /**
   * Keep prompts' token ids (prepare) and pass them, the adapter's name and cache_salt to
   * the engines: needed for their KV events (SimEngine.setKvEventListener). Off by default:
   * it costs a copy of every prompt's tokens.
   */
  kvEvents?: boolean
}

export interface VirtualRequest extends PromptSource {
  /** Already prepared prompt (see VirtualFleet.prepare): skips rendering and hashing. */
  prepared?: PreparedPrompt
  model?: string
  cacheSalt?: string
  maxTokens?: number
  /** Added simulated delay before the scheduler sees it (as the latency fault). */
  extraDelayMs?: number
}

export interface VirtualResult {
  instance: number
  arrivalMs: number
  firstTokenMs: number
  finishedMs: number
  ttftMs: number
  e2eMs: number
  promptTokens: number
  cachedTokens: number
  outputTokens: number
  finishReason: string
  preemptions: number
  /** Time per output token after the first: (finished - first token) / (outputTokens - 1); -1 with fewer than 2 tokens. */
  tpotMs: number
}

/** A disaggregated request's result: times from its first leg's arrival, and what each leg did. */
export interface PdResult extends VirtualResult, PdResultExtra {}

export interface SubmitOptions {
  /** Arrival time in simulated ms (default: now). */
  at?: number
  onFinish?: (r: VirtualResult) => void
  /** The first output token was sampled (prefill done), at simulated time `at`. */
  onFirstToken?: (at: number) => void
}

export interface PrefillOptions {
  /** Arrival time in simulated ms (default: now). */
  at?: number
  /** The prefill finished and answered (handle.kvTransferParams set; state `held`), or failed (`failed`). */
  onDone?: (handle: PrefillHandle, at: number) => void
  /** Its held blocks were freed: read, expired, cancelled, or lost in a restart. */
  onReleased?: (handle: PrefillHandle, how: string, at: number) => void
}

export interface DecodeOptions {
  /** Arrival time in simulated ms (default: now); with a PrefillHandle, not before it is done. */
  at?: number
  /** The first output token, at simulated time `at`. */
  onFirstToken?: (at: number) => void
  onFinish?: (r: PdResult) => void
}

export interface BootstrapOptions extends DecodeOptions {
  /** The prefill leg finished (its blocks wait for, or already go to, the decode leg). */
  onPrefillDone?: (at: number) => void
}

export class VirtualFleet {
  readonly clock = new VirtualClock()
  readonly engines: SimEngine[]
  readonly sim: ResolvedSim
  private readonly models: ModelRegistry
  private readonly tokenizer: Tokenizer
  private readonly withTokens: boolean
  private nextKvId = 0

  constructor(opts: VirtualFleetOptions) {
    this.sim = resolveSim(opts)
    this.withTokens = opts.kvEvents === true
    this.tokenizer = getTokenizer(this.sim.tokenizer)
    const ids = typeof opts.instances === 'number' ? Array.from({ length: opts.instances }, (_, i) => `sim-${i}`) : opts.instances
    if (ids.length < 1) throw new RangeError('instances must be at least 1')
    this.engines = ids.map((id) => new SimEngine(id, this.clock, this.sim.engine))
    this.models = new ModelRegistry(this.sim.model, this.sim.loras, this.sim.engine.maxModelLen)
  }

  /** Renders and hashes a prompt as a live worker would; reuse the result to skip that work. */
  prepare(req: PromptSource & { model?: string; cacheSalt?: string }): PreparedPrompt {
    const model = this.models.resolve(req.model)
    return preparePromptSource(req, this.tokenizer, this.sim.engine.blockSize, cacheSeed(model, req.cacheSalt), this.withTokens)
  }

  /** Queues a request to arrive at instance `instance` at `opts.at` (default now). */
  submit(instance: number, req: VirtualRequest, opts: SubmitOptions = {}): void {
    const { engine, request } = this.request(instance, req)
    const { onFinish, onFirstToken } = opts
    let listener: SeqListener | undefined
    if (onFinish !== undefined || onFirstToken !== undefined) {
      listener = {}
      if (onFinish !== undefined) listener.onFinish = (seq) => onFinish(result(instance, seq))
      if (onFirstToken !== undefined) {
        let fired = false
        listener.onTokens = (_seq, _count, at) => {
          if (fired) return
          fired = true
          onFirstToken(at)
        }
      }
    }
    this.arrive(opts.at, () => engine.submit(request, listener))
  }

  /**
   * vLLM's prefill leg (do_remote_decode, max_tokens 1): instance `instance` computes the
   * prompt and holds its blocks for a decode leg, for the engine's lease (kvLeaseMs) unless a
   * decode leg registers. Submit that decode leg from `onDone` with the handle.
   */
  submitPrefill(instance: number, req: VirtualRequest, opts: PrefillOptions = {}): PrefillHandle {
    const { engine, request } = this.request(instance, { ...req, maxTokens: 1 })
    const id = `vreq-${this.nextKvId++}`
    request.holdKv = { id }
    const at = Math.max(opts.at ?? this.clock.now(), this.clock.now())
    const h = new PrefillHandle(instance, engine, id, at)
    this.arrive(at, () =>
      engine.submit(request, {
        onFinish: (seq, t) => {
          if (seq.hold !== null) h.held(seq.hold, t)
          else {
            h.state = 'failed'
            h.doneAt = t
          }
          opts.onDone?.(h, t)
        },
        onKvReleased: (_seq, how, t) => {
          h.state = how
          opts.onReleased?.(h, how, t)
        },
      }),
    )
    return h
  }

  /**
   * vLLM's decode leg: instance `instance` reads the KV of `from` (a prefill handle, done, or the
   * kv_transfer_params of a prefill's answer) after the transfer time, then decodes. Parameters
   * vLLM finds unusable (no remote_block_ids, a remote_* key missing) make it prefill locally,
   * counted; blocks no longer held fail it or make it recompute (kvLoadFailurePolicy).
   */
  submitDecode(instance: number, req: VirtualRequest, from: PrefillHandle | KvTransferParams, opts: DecodeOptions = {}): void {
    const { engine, request } = this.request(instance, req)
    const at = Math.max(opts.at ?? this.clock.now(), this.clock.now())
    let source: RemoteKvSource | null = null
    let prefillInstance = -1
    let prefillDoneMs = -1
    let arrivalMs = at
    if (from instanceof PrefillHandle) {
      if (from.doneAt < 0) {
        throw new RangeError('the prefill leg has not answered yet: submit the decode leg from submitPrefill\'s onDone (or use submitBootstrap for both legs at once)')
      }
      if (at < from.doneAt) throw new RangeError(`the decode leg cannot arrive (${at} ms) before its prefill leg answered (${from.doneAt} ms)`)
      source = new HoldSource(from.engine, from.requestId)
      prefillInstance = from.instance
      prefillDoneMs = from.doneAt
      arrivalMs = from.arrivalMs
    } else {
      const leg = readKvLeg(from)
      if (leg.kind === 'decode') {
        const i = this.engines.findIndex((e) => e.kvEngineId === leg.remote.engineId)
        const refuse = i < 0 ? `no instance has engine id ${leg.remote.engineId} (restarted?)` : null
        source = new HoldSource(i < 0 ? null : this.engines[i]!, leg.remote.requestId, refuse)
        prefillInstance = i
      } else if (leg.kind === 'invalid') {
        engine.stats.kvInvalidParams++
      } else {
        throw new RangeError('submitDecode needs a prefill handle or a decode leg\'s kv_transfer_params (do_remote_prefill true)')
      }
    }
    if (source !== null) request.remoteKv = source
    this.arrive(at, () => engine.submit(request, this.pdListener(instance, arrivalMs, prefillInstance, () => prefillDoneMs, opts)))
  }

  /**
   * SGLang's flow: both legs arrive at once (`opts.at`), the same request with one bootstrap
   * room. The decode instance registers the room and waits (at most the bootstrap timeout)
   * for the prefill instance to compute it, then reads it after the transfer time.
   */
  submitBootstrap(prefillInstance: number, decodeInstance: number, req: VirtualRequest, opts: BootstrapOptions = {}): void {
    const p = this.request(prefillInstance, { ...req, maxTokens: 1 })
    const d = this.request(decodeInstance, req)
    const room = new Room(`vroom-${this.nextKvId++}`, p.engine)
    p.request.holdKv = { id: room.id, leaseMs: p.engine.config.kv.bootstrapTimeoutMs }
    d.request.remoteKv = new RoomSource(room, this.clock, d.engine.config.kv.bootstrapTimeoutMs)
    const at = Math.max(opts.at ?? this.clock.now(), this.clock.now())
    let prefillDoneMs = -1
    this.arrive(at, () => {
      p.engine.submit(p.request, {
        onFinish: (seq, t) => {
          prefillDoneMs = t
          room.settle(seq.hold)
          if (seq.hold !== null) opts.onPrefillDone?.(t)
        },
      })
      d.engine.submit(d.request, this.pdListener(decodeInstance, at, prefillInstance, () => prefillDoneMs, opts))
    })
  }

  private pdListener(instance: number, arrivalMs: number, prefillInstance: number, prefillDone: () => number, opts: DecodeOptions): SeqListener {
    const { onFinish, onFirstToken } = opts
    let fired = false
    return {
      onTokens: (_seq, _count, at) => {
        if (fired) return
        fired = true
        onFirstToken?.(at)
      },
      onFinish: (seq) => {
        if (onFinish === undefined) return
        const r = result(instance, seq)
        const e2e = seq.finishedAt - arrivalMs
        onFinish({
          ...r,
          arrivalMs,
          ttftMs: seq.firstTokenAt < 0 ? -1 : seq.firstTokenAt - arrivalMs,
          e2eMs: e2e,
          legs: legsOf(seq),
          prefillInstance,
          decodeArrivalMs: seq.arrivalAt,
          prefillDoneMs: prefillDone(),
          transferMs: seq.kvArrivedAt < 0 ? -1 : seq.kvArrivedAt - seq.pullStartedAt,
          localHitTokens: seq.localHitTokens,
          pulledTokens: seq.kvArrivedAt < 0 ? 0 : seq.pulledTokens,
          error: seq.error,
        })
      },
    }
  }

  /** The engine request for `req` on `instance`, as a live worker would build it. */
  private request(instance: number, req: VirtualRequest): { engine: SimEngine; request: EngineRequest } {
    const engine = this.engines[instance]
    if (engine === undefined) throw new RangeError(`instance must be from 0 to ${this.engines.length - 1}; got ${instance}`)
    const prompt = req.prepared ?? this.prepare(req)
    const out = outputPlan(this.sim, prompt.promptTokens, req.maxTokens)
    const problem = engine.check(prompt.promptTokens, out.maxTokens)
    if (problem !== undefined) throw new RangeError(problem)
    const request: EngineRequest = {
      promptTokens: prompt.promptTokens,
      blockKeys: prompt.blockKeys,
      maxTokens: out.maxTokens,
      finishReason: out.finishReason,
      extraDelayMs: req.extraDelayMs ?? 0,
    }
    if (prompt.tokenIds !== undefined) {
      request.tokenIds = prompt.tokenIds
      const model = this.models.resolve(req.model)
      if (model !== this.sim.model) request.loraName = model
      if (req.cacheSalt !== undefined) request.cacheSalt = req.cacheSalt
    }
    return { engine, request }
  }

  private arrive(at: number | undefined, fn: () => void): void {
    const t = at ?? this.clock.now()
    if (t <= this.clock.now()) fn()
    else this.clock.schedule(t, fn)
  }

  /** Runs simulated time up to `until` ms, or until nothing is left to do. */
  run(until?: number): void {
    if (until === undefined) this.clock.run()
    else this.clock.runUntil(until)
  }

  get now(): number {
    return this.clock.now()
  }

  /** Instance `i`'s /metrics text, as its live worker would serve it. */
  metrics(i: number): string {
    const e = this.engines[i]
    if (e === undefined) throw new RangeError(`no instance ${i}`)
    return renderMetrics(e, { modelName: this.sim.model })
  }
}

function result(instance: number, seq: Sequence): VirtualResult {
  return {
    instance,
    arrivalMs: seq.arrivalAt,
    firstTokenMs: seq.firstTokenAt,
    finishedMs: seq.finishedAt,
    ttftMs: seq.firstTokenAt < 0 ? -1 : seq.firstTokenAt - seq.arrivalAt,
    e2eMs: seq.finishedAt - seq.arrivalAt,
    promptTokens: seq.promptTokens,
    cachedTokens: seq.cachedTokens,
    outputTokens: seq.generated,
    finishReason: seq.finishReason ?? 'abort',
    preemptions: seq.preemptions,
    tpotMs: seq.generated > 1 && seq.firstTokenAt >= 0 ? (seq.finishedAt - seq.firstTokenAt) / (seq.generated - 1) : -1,
  }
}
