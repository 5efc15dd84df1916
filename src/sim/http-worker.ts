// One live simulated vLLM worker: an HTTP/1.1 server (and h2c on the same port when asked:
// a connection starting with the HTTP/2 preface goes to an http2 server, anything else to
// the HTTP/1.1 one) over one SimEngine on a RealClock. It can be stopped (connections
// refused, open ones reset) and started again on the same port, for the "down" fault.
// Beside it, each worker listens on a KV side channel (side-channel.ts: where decode workers
// read what its prefill legs hold) and, for prefill and both roles, an SGLang bootstrap
// server (bootstrap.ts).
import http from 'node:http'
import http2 from 'node:http2'
import net from 'node:net'
import { RealClock, type Clock } from './clock.js'
import type { ResolvedSim } from './config.js'
import { SimEngine } from './engine.js'
import { FaultInjector, faultsJson, NO_FAULTS, parseFaults, type FaultConfig } from './faults.js'
import { handleGeneration, type Api, type GenerateContext } from './generate.js'
import { destroy, parseJson, readBody, send, sendError, sendJson, type Req, type Res } from './http-util.js'
import { PROMETHEUS_CONTENT_TYPE, renderMetrics } from './metrics.js'
import { ModelRegistry } from './models.js'
import { embeddingsAnswer } from './embeddings.js'
import { ApiError } from './openai-shapes.js'
import { BootstrapServer } from './bootstrap.js'
import { SideChannelServer } from './side-channel.js'
import { detokenizeAnswer, tokenizeAnswer } from './tokenize-route.js'
import { h1h2cServer } from '../net/h2c-sniff.js'
import { requireFeature } from '../core/optional-packages.js'
import type { KvEventEncoding } from '../fleet/events/types.js'
import type { KvEventPublisher, KvPublishFaults, KvReplayFraming } from './kv-publisher.js'

/** Where and how a worker publishes its engine's KV events (vLLM's --kv-events-config). */
export interface SimKvEventsOptions {
  /** PUB port; 0 picks a free one (kept across stop/start). */
  port: number
  /** ROUTER port answering replay requests; 0 picks a free one; undefined: no replay. */
  replayPort?: number
  topic?: string
  encoding?: KvEventEncoding
  /** Replay answers with the topic frame (vLLM 0.26.0 on, the default) or without (older vLLM). */
  replayFraming?: KvReplayFraming
  bufferSteps?: number
}

export interface SimWorkerOptions {
  id: string
  /** The engine label in metrics (vLLM's engine index). */
  index?: number
  host?: string
  /** 0 picks a free port (kept across stop/start). */
  port?: number
  h2c?: boolean
  sim: ResolvedSim
  clock?: Clock
  faults?: FaultConfig
  kvEvents?: SimKvEventsOptions
  /** The KV side channel's port (vLLM's VLLM_NIXL_SIDE_CHANNEL_PORT); 0 or undefined picks a free one (kept across stop/start). */
  sideChannelPort?: number
  /** SGLang's bootstrap server port; 0 picks a free one; undefined: none. */
  bootstrapPort?: number
}

const GENERATION: Record<string, Api> = {
  '/v1/chat/completions': 'chat',
  '/v1/completions': 'completion',
  '/invocations': 'invocation',
  '/v1/responses': 'responses',
}

export class SimWorker {
  readonly id: string
  readonly engine: SimEngine
  readonly models: ModelRegistry
  readonly faults: FaultInjector
  readonly host: string
  private portNumber: number
  private readonly h1: http.Server
  private readonly h2: http2.Http2Server | undefined
  private readonly listener: net.Server
  private readonly sockets = new Set<net.Socket>()
  private readonly ctx: GenerateContext
  private downTimer: NodeJS.Timeout | undefined
  private publisher: KvEventPublisher | null = null
  private side: SideChannelServer | null = null
  private boot: BootstrapServer | null = null
  private sidePort: number
  private bootPort: number | undefined
  private listening = false
  private closed = false

  constructor(private readonly opts: SimWorkerOptions) {
    this.id = opts.id
    this.host = opts.host ?? '127.0.0.1'
    this.portNumber = opts.port ?? 0
    this.sidePort = opts.sideChannelPort ?? 0
    this.bootPort = opts.bootstrapPort
    const clock = opts.clock ?? new RealClock(opts.sim.timeScale)
    this.engine = new SimEngine(opts.id, clock, opts.sim.engine)
    this.models = new ModelRegistry(opts.sim.model, opts.sim.loras, opts.sim.engine.maxModelLen)
    this.faults = new FaultInjector(opts.faults ?? { ...NO_FAULTS })
    this.ctx = {
      engine: this.engine,
      models: this.models,
      sim: opts.sim,
      faults: this.faults,
      hanging: new Set(),
      pd: { role: opts.sim.role, sideChannel: null, bootstrap: null },
    }
    const onRequest = (req: Req, res: Res): void => void this.handle(req, res)
    this.h1 = http.createServer({ keepAliveTimeout: 30_000 }, onRequest)
    if (opts.h2c === true) {
      const h1 = this.h1
      const h2 = (this.h2 = http2.createServer({}, onRequest))
      this.listener = h1h2cServer(h1, h2, (socket) => this.track(socket))
    } else {
      this.listener = this.h1
      this.h1.on('connection', (s: net.Socket) => this.track(s))
    }
  }

  get port(): number {
    return this.portNumber
  }

  get url(): string {
    const h = this.host.includes(':') ? `[${this.host}]` : this.host
    return `http://${h}:${this.portNumber}`
  }

  get isListening(): boolean {
    return this.listening
  }

  /** The KV-event publisher (once started with kvEvents), for its endpoints and counters. */
  get kvPublisher(): KvEventPublisher | null {
    return this.publisher
  }

  /** The KV side channel's port (remote_port of this worker's prefill answers), once started. */
  get sideChannelPort(): number {
    return this.sidePort
  }

  /** The KV side channel and the SGLang bootstrap server, while listening. */
  get sideChannel(): SideChannelServer | null {
    return this.side
  }

  get bootstrap(): BootstrapServer | null {
    return this.boot
  }

  /** The SGLang bootstrap server's port, or undefined if this worker runs none. */
  get bootstrapPort(): number | undefined {
    return this.bootPort
  }

  /**
   * The engine process restarts: cache emptied, requests in flight aborted, and KV events
   * start over at sequence 0 with an empty replay buffer on new sockets (subscribers see
   * their connection drop), as with a new vLLM process. Resolves once those are bound.
   */
  async restart(): Promise<void> {
    this.engine.restart()
    await this.publisher?.restart()
  }

  /** Starts (or restarts) listening on the worker's port. */
  async start(): Promise<void> {
    if (this.closed) throw new Error(`worker ${this.id} is closed`)
    if (this.listening) return
    const kv = this.opts.kvEvents
    if (kv !== undefined && this.publisher === null) {
      // Loaded only here: a worker without KV events never loads ZeroMQ's addon (an optional package).
      requireFeature('simKvEvents')
      const { KvEventPublisher } = await import('./kv-publisher.js')
      const pub = await KvEventPublisher.open({
        host: this.host,
        port: kv.port,
        ...(kv.replayPort !== undefined ? { replayPort: kv.replayPort } : {}),
        ...(kv.topic !== undefined ? { topic: kv.topic } : {}),
        ...(kv.encoding !== undefined ? { encoding: kv.encoding } : {}),
        ...(kv.replayFraming !== undefined ? { replayFraming: kv.replayFraming } : {}),
        ...(kv.bufferSteps !== undefined ? { bufferSteps: kv.bufferSteps } : {}),
        faults: kvFaults(this.faults.config),
      })
      this.publisher = pub
      // vLLM stamps a batch with the engine's wall clock (time.time()).
      this.engine.setKvEventListener((events) => pub.publish(events, Date.now() / 1000))
    }
    await new Promise<void>((resolve, reject) => {
      const onError = (err: Error): void => reject(err)
      this.listener.once('error', onError)
      this.listener.listen(this.portNumber, this.host, () => {
        this.listener.off('error', onError)
        resolve()
      })
    })
    this.portNumber = (this.listener.address() as net.AddressInfo).port
    this.listening = true
    try {
      this.side = await SideChannelServer.open(this.engine, this.host, this.sidePort)
      this.sidePort = this.side.port
      if (this.bootPort !== undefined) {
        this.boot = await BootstrapServer.open(this.engine, this.host, this.bootPort)
        this.bootPort = this.boot.port
      }
    } catch (err) {
      await this.stop()
      throw err
    }
    this.ctx.pd.sideChannel = this.side
    this.ctx.pd.bootstrap = this.boot
  }

  /** Refuses new connections and resets open ones (their sequences are aborted). */
  async stop(): Promise<void> {
    if (!this.listening) return
    this.listening = false
    const closed = new Promise<void>((resolve) => this.listener.close(() => resolve()))
    for (const s of this.sockets) s.destroy()
    for (const res of this.ctx.hanging) destroy(res)
    const side = this.side
    const boot = this.boot
    this.side = this.boot = null
    this.ctx.pd.sideChannel = this.ctx.pd.bootstrap = null
    await Promise.all([closed, side?.close(), boot?.close()])
  }

  /** Stops the worker for good: sockets, engine, timers. */
  async close(): Promise<void> {
    if (this.closed) return
    clearTimeout(this.downTimer)
    await this.stop()
    this.closed = true
    this.engine.close()
    this.engine.setKvEventListener(null)
    await this.publisher?.close()
  }

  private track(socket: net.Socket): void {
    this.sockets.add(socket)
    socket.on('close', () => this.sockets.delete(socket))
  }

  private async handle(req: Req, res: Res): Promise<void> {
    res.setHeader('x-sim-instance', this.id)
    const url = req.url ?? '/'
    const q = url.indexOf('?')
    const path = q < 0 ? url : url.slice(0, q)
    const method = req.method ?? 'GET'
    // As vLLM's --api-key: every /v1 route wants the key; /health, /metrics, /tokenize do not.
    const key = this.opts.sim.apiKey
    if (key !== undefined && path.startsWith('/v1') && method !== 'OPTIONS' && req.headers.authorization !== `Bearer ${key}`) {
      return sendJson(res, 401, { error: 'Unauthorized' })
    }
    try {
      const api = GENERATION[path]
      if (api !== undefined) {
        allow(method, 'POST')
        await handleGeneration(this.ctx, req, res, api)
        return
      }
      switch (path) {
        case '/v1/models':
          allow(method, 'GET')
          return sendJson(res, 200, this.models.list())
        case '/v1/load_lora_adapter':
          allow(method, 'POST')
          return send(res, 200, 'text/plain; charset=utf-8', this.models.load(parseJson(await readBody(req))))
        case '/v1/unload_lora_adapter':
          allow(method, 'POST')
          return send(res, 200, 'text/plain; charset=utf-8', this.models.unload(parseJson(await readBody(req))))
        case '/health':
        case '/ping':
          allow(method, 'GET', path === '/ping' ? 'POST' : 'GET')
          if (this.faults.config.healthFail) throw new ApiError(503, 'Simulated fault: unhealthy.', 'ServiceUnavailableError')
          return send(res, 200, 'application/json', path === '/ping' ? '{}' : '')
        case '/metrics':
          allow(method, 'GET')
          return send(
            res,
            200,
            PROMETHEUS_CONTENT_TYPE,
            renderMetrics(this.engine, { modelName: this.models.base, engineIndex: 0, role: this.opts.sim.role }),
          )
        case '/v1/embeddings':
          allow(method, 'POST')
          return sendJson(res, 200, embeddingsAnswer(parseJson(await readBody(req)), this.models))
        case '/tokenize':
        case '/detokenize': {
          allow(method, 'POST')
          const answer = path === '/tokenize' ? tokenizeAnswer : detokenizeAnswer
          return sendJson(res, 200, answer(parseJson(await readBody(req)), this.models, this.opts.sim))
        }
        case '/version':
          allow(method, 'GET')
          return sendJson(res, 200, { version: 'prefix-router-sim' })
        case '/sim/faults':
          allow(method, 'GET', 'POST')
          if (method === 'POST') return await this.setFaults(parseJson(await readBody(req)), res)
          return sendJson(res, 200, faultsJson(this.faults.config))
        case '/sim/state':
          allow(method, 'GET')
          return sendJson(res, 200, this.state())
        case '/sim/restart':
          allow(method, 'POST')
          await this.restart()
          return sendJson(res, 200, { restarted: true })
        default:
          throw new ApiError(404, `Not Found: ${path}`, 'NotFoundError')
      }
    } catch (err) {
      if (err instanceof ApiError) sendError(res, err)
      else sendError(res, new ApiError(500, `Internal error: ${(err as Error)?.message ?? String(err)}`))
    }
  }

  private async setFaults(body: unknown, res: Res): Promise<void> {
    const { faults, downMs, restart } = parseFaults(body)
    this.faults.set(faults)
    this.publisher?.setFaults(kvFaults(faults))
    if (restart) await this.restart()
    sendJson(res, 200, {
      ...faultsJson(faults),
      ...(downMs !== undefined ? { down_ms: downMs } : {}),
      ...(restart ? { restart: true } : {}),
    })
    if (downMs === undefined) return
    // Answer first, then go down: the caller learns the fault took effect.
    res.once('finish', () => {
      clearTimeout(this.downTimer)
      void this.stop().then(() => {
        if (this.closed) return
        this.downTimer = setTimeout(() => void this.start().catch(() => {}), downMs)
      })
    })
  }

  /** Engine state for tests and operators (not a vLLM endpoint). */
  state(): object {
    const e = this.engine
    return {
      id: this.id,
      running: e.numRunning,
      waiting: e.numWaiting,
      pending: e.numPending,
      kv_blocks: e.cache.capacity,
      kv_blocks_used: e.cache.usedBlocks,
      kv_blocks_cached: e.cache.cachedBlocks,
      evictions: e.cache.evictions,
      steps: e.stats.steps,
      sim_time_ms: e.clock.now(),
      prompt_tokens_computed: e.stats.computedTokens,
      role: this.opts.sim.role,
      kv_transfer: this.kvTransferState(),
      ...(this.publisher !== null ? { kv_events: kvState(this.publisher) } : {}),
    }
  }

  /** Prefill/decode disaggregation: what this worker holds for decodes and what it pulled. */
  private kvTransferState(): object {
    const e = this.engine
    const s = e.stats
    const kv = e.config.kv
    return {
      engine_id: e.kvEngineId,
      side_channel: this.side === null ? null : `${this.side.host}:${this.side.port}`,
      bootstrap: this.boot === null ? null : `${this.boot.host}:${this.boot.port}`,
      held_requests: e.holds.size,
      held_blocks: e.holds.blocks,
      holds: s.kvHolds,
      holds_read: s.kvHoldsRead,
      holds_expired: s.kvHoldsExpired,
      pulling: e.numPulling,
      transfers: s.kvTransfers,
      transfer_tokens: s.externalTokens,
      transfer_bytes: s.kvTransferBytes,
      transfer_seconds: s.xferTime.sum,
      transfer_failures: s.kvTransferFailures,
      invalid_params: s.kvInvalidParams,
      side_channel_pulls: this.side?.pulls ?? 0,
      side_channel_refused: this.side?.refused ?? 0,
      heartbeats: this.side?.heartbeats ?? 0,
      bootstrap_registered: this.boot?.registered ?? 0,
      bootstrap_rooms_open: this.boot?.openRooms ?? 0,
      bootstrap_timed_out: this.boot?.timedOut ?? 0,
      lease_ms: kv.leaseMs,
      load_failure_policy: kv.loadFailurePolicy,
      link_gb_per_sec: kv.linkBytesPerSec / 1e9,
      transfer_latency_ms: kv.latencyMs,
      bytes_per_token: kv.bytesPerToken,
    }
  }
}

function kvFaults(f: FaultConfig): KvPublishFaults {
  return { dropRate: f.kvDropRate, delayMs: f.kvDelayMs, seed: f.seed }
}

function kvState(p: KvEventPublisher): object {
  return {
    endpoint: p.endpoint,
    replay_endpoint: p.replayEndpoint,
    encoding: p.encoding,
    replay_framing: p.replayFraming,
    topic: p.topic,
    next_seq: p.nextSeq,
    sent: p.sent,
    dropped: p.dropped,
    replays: p.replays,
    errors: p.errors,
    subscribers: p.subscribers,
  }
}

function allow(method: string, ...allowed: string[]): void {
  if (!allowed.includes(method)) throw new ApiError(405, 'Method Not Allowed', 'MethodNotAllowed')
}
