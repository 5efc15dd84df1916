// One strategy's run: its own virtual fleet (engines, caches, clock) and router, fed the
// same prepared requests as every other lane. A lane advances its clock to each arrival,
// asks its router, submits to the chosen engine, and releases the router's lease when the
// engine reports the request finished, so in-flight counts and overflow are the router's
// real ones.
import { VirtualFleet } from '../sim/virtual-fleet.js'
import type { SimOptions } from '../sim/config.js'
import type { PreparedRequest } from './prepare.js'
import { ReplicatedRouter, type ReplayRouter, type RouterFactory } from './routers.js'
import { KeyTracker, LaneStats, RequestLog } from './stats.js'
import { deliverKvEvents } from './kv-delivery.js'

export interface ScaleEvent {
  atMs: number
  kind: 'add' | 'remove'
}

export interface LaneOptions {
  /** Instances at the start. */
  instances: number
  /** Engines to create: the starting instances plus one per add event (idle until added). */
  engines: number
  sim: SimOptions
  prefixLength: number
  /** Undefined: each strategy's own default (10; none for longest_prefix). */
  concurrencyThreshold: number | undefined
  replicas: number
  seed: number
  durationMs: number
  events: readonly ScaleEvent[]
  /** Window for moved-share measurements around scale events. */
  windowMs: number
  /**
   * Simulated delay between an engine's step publishing KV events and their arrival at the
   * lane's router (the ZeroMQ hop and the subscriber's decoding), for routers fed by them.
   */
  kvEventsDelayMs: number
  /** Keep every finished request (for per-phase results). */
  keepRequests: boolean
  /**
   * How often each router replica reads its engines' load (vLLM's running and waiting
   * gauges), for routers that weigh it; 0: never (own counts only).
   */
  engineLoadIntervalMs: number
  /** Replicas of routers that share load publish their queued prefill this often (0: never)… */
  shareLoadIntervalMs: number
  /** …and it reaches the others this much later. */
  shareLoadDelayMs: number
}

/** --kv-events-delay's default: a few ms, what a subscriber on the same network sees. */
export const DEFAULT_KV_EVENTS_DELAY_MS = 5

/** --engine-load-interval's default: serve's --engine-load-interval-ms default. */
export const DEFAULT_ENGINE_LOAD_INTERVAL_MS = 100
/** --share-load-interval's and --share-load-delay's defaults: serve's share interval, and a Redis round trip in one zone. */
export const DEFAULT_SHARE_LOAD_INTERVAL_MS = 10
export const DEFAULT_SHARE_LOAD_DELAY_MS = 1

export class Lane {
  readonly fleet: VirtualFleet
  readonly router: ReplayRouter
  readonly stats: LaneStats
  readonly tracker: KeyTracker | null
  /** Engine indexes that were in the fleet at any time (shares are reported for these). */
  readonly everMembers = new Set<number>()
  private members: number[]
  private nextEngine: number
  private readonly engineLoadIntervalMs: number
  private readonly shareLoadIntervalMs: number

  constructor(
    readonly factory: RouterFactory,
    o: LaneOptions,
  ) {
    this.fleet = new VirtualFleet({ ...o.sim, instances: o.engines })
    this.engineLoadIntervalMs = o.engineLoadIntervalMs
    this.shareLoadIntervalMs = o.shareLoadIntervalMs
    const ids = this.fleet.engines.map((e) => e.id)
    this.members = Array.from({ length: o.instances }, (_, i) => i)
    this.nextEngine = o.instances
    for (const m of this.members) this.everMembers.add(m)
    const ctx = {
      ids,
      engines: this.fleet.engines,
      members: this.members,
      prefixLength: o.prefixLength,
      concurrencyThreshold: o.concurrencyThreshold,
      model: this.fleet.sim.model,
      kvBlocks: this.fleet.sim.engine.kvBlocks,
      blockSize: this.fleet.sim.engine.blockSize,
      replicaGroup: {},
    }
    const replicas = Array.from({ length: o.replicas }, (_, k) => factory.create({ ...ctx, seed: o.seed + k }))
    this.router = replicas.length === 1 ? replicas[0]! : new ReplicatedRouter(replicas)
    if (this.router.kvEvents !== undefined) deliverKvEvents(this.fleet, this.router.kvEvents, o.kvEventsDelayMs)
    if (this.router.scrapeEngines !== undefined && o.engineLoadIntervalMs > 0) this.scrape(this.router.scrapeEngines, o.engineLoadIntervalMs / o.replicas, o.durationMs)
    const share = this.router instanceof ReplicatedRouter ? this.router.shareLoad : undefined
    if (share !== undefined && o.shareLoadIntervalMs > 0) this.share(share, o.shareLoadIntervalMs, o.shareLoadDelayMs, o.durationMs)
    this.stats = new LaneStats(factory.name, o.engines, o.durationMs, o.keepRequests ? new RequestLog() : null)
    this.tracker = o.events.length === 0 ? null : new KeyTracker(o.events, o.windowMs)
  }

  /** True when this lane's replicas share their queued prefill. */
  get sharesLoad(): boolean {
    return this.shareLoadIntervalMs > 0 && this.router instanceof ReplicatedRouter && this.router.shareLoad !== undefined
  }

  /** True when this lane's router weighs the engines' reported load. */
  get readsEngineLoad(): boolean {
    return this.router.scrapeEngines !== undefined && this.engineLoadIntervalMs > 0
  }

  /** True when this lane's router reads the engines' KV events (its prompts need token ids). */
  get wantsKvEvents(): boolean {
    return this.router.kvEvents !== undefined
  }


  /** Scrapes of the members' engines every `everyMs` of simulated time, until `untilMs`. */
  private scrape(scrape: NonNullable<ReplayRouter['scrapeEngines']>, everyMs: number, untilMs: number): void {
    const clock = this.fleet.clock
    const engines = this.fleet.engines
    const read = (i: number) => ({ running: engines[i]!.numRunning, waiting: engines[i]!.numWaiting })
    const tick = (at: number): void => {
      scrape(read, this.members, at)
      if (at + everyMs < untilMs) clock.schedule(at + everyMs, tick)
    }
    clock.schedule(everyMs, tick)
  }

  /**
   * Replicas publishing their queued prefill every `everyMs` (each its own timer, modelled as
   * one), each publication reaching the others `delayMs` later (the Redis round trip).
   */
  private share(share: () => () => void, everyMs: number, delayMs: number, untilMs: number): void {
    const clock = this.fleet.clock
    const tick = (at: number): void => {
      const deliver = share()
      clock.schedule(at + delayMs, () => deliver())
      if (at + everyMs < untilMs) clock.schedule(at + everyMs, tick)
    }
    clock.schedule(everyMs, tick)
  }

  /** Open loop: runs the clock up to the request's arrival, then routes and submits it. */
  arrive(req: PreparedRequest): void {
    this.fleet.run(req.at)
    this.dispatch(req)
  }

  /** Requests this lane has drawn in closed loop. */
  drawn = 0

  /**
   * Closed loop: `clients` clients, each sending the next request from `take` at time 0 and
   * again whenever its previous request has finished, until `durationMs`. The caller runs the
   * clock (fleet.run) to drive it.
   */
  startClosedLoop(take: (i: number) => PreparedRequest | undefined, clients: number, durationMs: number): void {
    const clock = this.fleet.clock
    const send = (): void => {
      const now = clock.now()
      if (now >= durationMs) return
      const req = take(this.drawn)
      if (req === undefined) return
      this.drawn++
      // The next send runs as an event of its own, not inside the engine's finish handling.
      this.dispatch({ ...req, at: now }, () => void clock.schedule(clock.now(), send))
    }
    for (let c = 0; c < clients; c++) clock.schedule(0, send)
  }

  /** Routes a request arriving now and submits it; `then` runs once it has finished or been refused. */
  private dispatch(req: PreparedRequest, then?: () => void): void {
    const fleet = this.fleet
    const placement = this.router.route(req, req.at)
    this.stats.routedTo(placement.instance, placement.overflow)
    if (this.tracker !== null) this.tracker.record(req.key, placement.instance, req.at)
    const stats = this.stats
    try {
      fleet.submit(
        placement.instance,
        req.maxTokens === undefined ? { prepared: req.prompt } : { prepared: req.prompt, maxTokens: req.maxTokens },
        {
          at: req.at,
          ...(placement.firstToken !== undefined && { onFirstToken: () => placement.firstToken!() }),
          onFinish: (r) => {
            placement.finish()
            stats.done(r)
            then?.()
          },
        },
      )
    } catch (err) {
      // The engine refuses what vLLM would answer 400 to (prompt + output over the
      // context): counted, and the router's lease released.
      if (!(err instanceof RangeError)) throw err
      placement.finish()
      stats.rejected++
      then?.()
    }
  }

  /** Applies a scale event at its time (the clock is first run up to it). */
  scale(ev: ScaleEvent): void {
    this.fleet.run(ev.atMs)
    if (ev.kind === 'add') {
      this.members = [...this.members, this.nextEngine++]
      this.everMembers.add(this.members[this.members.length - 1]!)
      this.tracker?.freeze(ev.atMs, this.members[this.members.length - 1]!, this.members.length)
    } else if (this.members.length > 1) {
      // The most recently added instance goes first (the highest-numbered member).
      const gone = this.members[this.members.length - 1]!
      this.members = this.members.slice(0, -1)
      this.tracker?.freeze(ev.atMs, gone, this.members.length)
    } else {
      this.tracker?.freeze(ev.atMs)
    }
    this.router.setInstances(this.members, ev.atMs)
  }

  /** Runs until every submitted request has finished. */
  drain(): void {
    this.fleet.run()
  }

  close(): void {
    this.router.close()
    for (const e of this.fleet.engines) e.close()
  }
}
