// N engines on one VirtualClock: the live workers' model with no sockets and no waiting,
// so hours of traffic over dozens of instances replay in seconds. Requests arrive at
// simulated times; each result carries what a client of a live worker would have seen.
import { VirtualClock } from './clock.js'
import { cacheSeed, type PreparedPrompt } from './block-hash.js'
import { resolveSim, type ResolvedSim, type SimOptions } from './config.js'
import { SimEngine } from './engine.js'
import { renderMetrics } from './metrics.js'
import { ModelRegistry } from './models.js'
import { outputPlan, preparePromptSource, type PromptSource } from './request.js'
import type { EngineRequest, Sequence, SeqListener } from './sequence.js'
import { getTokenizer, type Tokenizer } from './tokenizers/index.js'

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
}

export interface SubmitOptions {
  /** Arrival time in simulated ms (default: now). */
  at?: number
  onFinish?: (r: VirtualResult) => void
  /** The first output token was sampled (prefill done), at simulated time `at`. */
  onFirstToken?: (at: number) => void
}

export class VirtualFleet {
  readonly clock = new VirtualClock()
  readonly engines: SimEngine[]
  readonly sim: ResolvedSim
  private readonly models: ModelRegistry
  private readonly tokenizer: Tokenizer
  private readonly withTokens: boolean

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
    const engine = this.engines[instance]
    if (engine === undefined) throw new RangeError(`instance must be from 0 to ${this.engines.length - 1}; got ${instance}`)
    const prompt = req.prepared ?? this.prepare(req)
    const out = outputPlan(this.sim, prompt.promptTokens, req.maxTokens)
    const problem = engine.check(prompt.promptTokens, out.maxTokens)
    if (problem !== undefined) throw new RangeError(problem)
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
    const arrive = (): void => {
      engine.submit(request, listener)
    }
    const at = opts.at ?? this.clock.now()
    if (at <= this.clock.now()) arrive()
    else this.clock.schedule(at, arrive)
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
  }
}
