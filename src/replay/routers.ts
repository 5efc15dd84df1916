// The routers a replay compares, behind one small interface: our native Router (every
// strategy in STRATEGIES, so a strategy added to the core shows up here by itself) and
// the TypeScript re-implementations of other routers' policies (src/replay/peers/).
import type { KvEvent } from '../fleet/events/types.js'
import type { SimEngine } from '../sim/engine.js'
import { Router, type PickOptions } from '../core/router.js'
import { LIMITS, parsePlacement, parseStrategy, STRATEGIES, type InstanceSpec, type Placement as KeyPlacement, type RouterOptions, type RoutingParams } from '../core/options.js'
import { STRATEGY_INFO } from '../core/strategies.js'
import { BYTES_PER_TOKEN } from '../sim/tokenizer.js'
import type { PreparedRequest } from './prepare.js'

/** Where one request goes, and what to call when it ends. */
export interface Placement {
  /** Engine index in the lane's fleet. */
  instance: number
  /** The strategy's preferred instance was skipped for load; null if the strategy has no such notion. */
  overflow: boolean | null
  /** The request finished (or failed): release whatever the router counts in flight. */
  finish(): void
  /** The first token arrived (prefill is over), for routers that track prefill in flight. */
  firstToken?(): void
}

export interface ReplayRouter {
  route(req: PreparedRequest, now: number): Placement
  /**
   * Routers fed by the engines' KV events: a batch of engine `instance`'s events, delivered
   * at simulated `atMs` (the lane adds its --kv-events-delay). A lane whose router has this
   * turns its engines' events on and prepares prompts with their token ids.
   */
  kvEvents?: (instance: number, events: readonly KvEvent[], atMs: number) => void
  /**
   * Routers that weigh the engines' own load (as `serve` scrapes each instance's /metrics):
   * one scrape, by one replica, of every member's running and waiting requests at `atMs`.
   * The lane calls it every interval ÷ replicas, so each replica of K scrapes once per interval,
   * their scrapes staggered as independent pods' timers are.
   */
  scrapeEngines?: (read: (instance: number) => EngineReading, members: readonly number[], atMs: number) => void
  /** The fleet's members changed (scale events); `members` are engine indexes. */
  setInstances(members: readonly number[], now: number): void
  close(): void
}

/** What an engine's /metrics says of its load: vllm:num_requests_running and _waiting. */
export interface EngineReading {
  running: number
  waiting: number
}

export interface RouterContext {
  /** Instance ids by engine index ("sim-0", …). */
  ids: readonly string[]
  /** Live engines by index: the signals peers read from metrics (queue, KV usage). */
  engines: readonly SimEngine[]
  /** Engine indexes in the fleet at the start. */
  members: readonly number[]
  prefixLength: number
  /** Undefined: the strategy's own default. */
  concurrencyThreshold: number | undefined
  /** Name of the served model (peers key their hashes by it). */
  model: string
  /** Per-instance KV capacity, for routers whose index defaults from it. */
  kvBlocks: number
  blockSize: number
  seed: number
  /** The same object for every replica of one lane: for peers whose replicas sync state. */
  replicaGroup: object
}

export interface RouterFactory {
  /** Name in reports and on the command line. */
  name: string
  /** Where it comes from, for the report. */
  source: string
  create(ctx: RouterContext): ReplayRouter
}

/**
 * Our native strategies, read from the core's list at run time, and each that reads a
 * placement once more with `placement: hash` (`longest_prefix:hash`), so both placements show
 * side by side.
 */
export function nativeStrategies(): string[] {
  return [...STRATEGIES, ...STRATEGY_INFO.filter((s) => s.placement).map((s) => `${s.name}:hash`)]
}

/**
 * Our Router (src/core/router.ts) with the given strategy (`name` or `name:placement`), routing
 * exactly as `serve` does; `params` overrides routing parameters (and `label` the lane's name).
 */
export function nativeFactory(spec: string, params: RoutingParams = {}, label?: string): RouterFactory {
  const [strategy, placement] = spec.split(':')
  const name = parseStrategy(strategy)
  const p = placement === undefined ? undefined : parsePlacement(placement)
  return {
    name: label ?? (p === undefined ? name : `${name}:${p}`),
    source: 'prefix-router (native core)',
    create: (ctx) => new NativeRouter(name, p, ctx, params),
  }
}

export class NativeRouter implements ReplayRouter {
  /** Shares its queued prefill with its sibling replicas (as `serve --share-load` does through Redis). */
  readonly sharesLoad: boolean = false
  protected readonly router: Router
  protected readonly index = new Map<string, number>()

  constructor(strategy: string, placement: KeyPlacement | undefined, protected readonly ctx: RouterContext, params: RoutingParams) {
    ctx.ids.forEach((id, i) => this.index.set(id, i))
    const options: RouterOptions = {
      ...params,
      strategy,
      ...(placement !== undefined && { placement }),
      prefixLength: ctx.prefixLength,
      ...(ctx.concurrencyThreshold !== undefined && { concurrencyThreshold: ctx.concurrencyThreshold }),
      instances: this.specs(ctx.members),
    }
    this.router = new Router(options)
  }

  route(req: PreparedRequest, now: number): Placement {
    const lease = this.router.pick(req.text, { ...(req.tenant !== undefined && { tenant: req.tenant }), ...(req.anchor !== undefined && { anchor: req.anchor }), ...this.pickExtras(req, now) })
    return { instance: this.index.get(lease.instance)!, overflow: lease.overflow, firstToken: () => lease.firstToken(), finish: () => lease.release() }
  }

  /** More pick options, for subclasses (the events lane passes the prompt's tokens). */
  protected pickExtras(_req: PreparedRequest, _now: number): PickOptions {
    return {}
  }

  /**
   * What `serve` does with each answer (src/fleet/load/): the engine's requests beyond this
   * router's own in flight there are other clients', counted on top of its own until the
   * next scrape.
   */
  readonly scrapeEngines = (read: (instance: number) => EngineReading, members: readonly number[]): void => {
    for (const m of members) {
      const id = this.ctx.ids[m]!
      const e = read(m)
      this.external[m] = Math.max(0, e.running + e.waiting - this.router.inFlight(id))
      this.router.setEngineLoad(id, this.external[m]!, this.sharedPrefill[m] ?? 0)
    }
  }

  /** Others' requests in flight, by engine index, from the last scrape. */
  private readonly external: number[] = []
  /** Other replicas' queued prefill, by engine index, as they last shared it. */
  private readonly sharedPrefill: number[] = []

  /** This router's own queued prefill blocks, by engine index (what it would share). */
  ownPrefill(): number[] {
    const out: number[] = []
    for (const row of this.router.instances()) out[this.index.get(row.id)!] = row.queuedPrefillBlocks
    return out
  }

  /** Other replicas' queued prefill, by engine index, as shared. */
  setSharedPrefill(byEngine: readonly number[]): void {
    byEngine.forEach((q, m) => {
      this.sharedPrefill[m] = q
      this.router.setEngineLoad(this.ctx.ids[m]!, this.external[m] ?? 0, q)
    })
  }

  setInstances(members: readonly number[]): void {
    this.router.setInstances(this.specs(members))
  }

  close(): void {
    this.router.close()
  }

  protected specs(members: readonly number[]): InstanceSpec[] {
    // What `serve` gives longest_prefix once it has read an instance's
    // vllm:cache_config_info (src/fleet/instance.ts indexCapacity): the KV capacity in
    // tokens at ~4 bytes of routing text each, in blocks of the router's default size.
    // Other strategies ignore it. An estimate under any simulator tokenizer, as in `serve`:
    // o200k puts more bytes in a token (about 5.8 in the workloads' prose), so the index is
    // somewhat smaller than the caches it mirrors.
    const indexBlocks = Math.max(1, Math.round((this.ctx.kvBlocks * this.ctx.blockSize * BYTES_PER_TOKEN) / LIMITS.blockSize.default))
    return members.map((i) => ({ id: this.ctx.ids[i]!, indexBlocks }))
  }
}

/**
 * K independent routers of one kind (each its own index and in-flight counters), with
 * requests dealt round-robin, as a load balancer in front of K router pods would deal
 * connections of one request each.
 */
export class ReplicatedRouter implements ReplayRouter {
  private next = 0

  readonly kvEvents?: (instance: number, events: readonly KvEvent[], atMs: number) => void
  readonly scrapeEngines?: NonNullable<ReplayRouter['scrapeEngines']>
  private nextScrape = 0

  constructor(private readonly replicas: readonly ReplayRouter[]) {
    if (replicas.length < 1) throw new RangeError('at least one replica')
    // Every replica subscribes to every engine, as each router pod would.
    if (replicas.every((r) => r.kvEvents !== undefined)) {
      this.kvEvents = (instance, events, atMs) => {
        for (const r of replicas) r.kvEvents!(instance, events, atMs)
      }
    }
    // Each call is one replica's scrape, in turn: K replicas' timers, staggered.
    if (replicas.every((r) => r.scrapeEngines !== undefined)) {
      this.scrapeEngines = (read, members, atMs) => {
        const r = this.replicas[this.nextScrape]!
        this.nextScrape = this.nextScrape + 1 === this.replicas.length ? 0 : this.nextScrape + 1
        r.scrapeEngines!(read, members, atMs)
      }
    }
  }

  /**
   * Replicas sharing their queued prefill (as through Redis): each publishes its own per
   * instance; the returned call delivers the sums of the others' to each.
   */
  get shareLoad(): (() => () => void) | undefined {
    const natives = this.replicas.filter((r): r is NativeRouter => r instanceof NativeRouter && r.sharesLoad)
    if (natives.length !== this.replicas.length) return undefined
    return () => {
      const own = natives.map((r) => r.ownPrefill())
      return () => {
        natives.forEach((r, k) => {
          const sum: number[] = []
          own.forEach((o, j) => {
            if (j !== k) o.forEach((q, m) => (sum[m] = (sum[m] ?? 0) + (q ?? 0)))
          })
          r.setSharedPrefill(sum)
        })
      }
    }
  }

  route(req: PreparedRequest, now: number): Placement {
    const r = this.replicas[this.next]!
    this.next = this.next + 1 === this.replicas.length ? 0 : this.next + 1
    return r.route(req, now)
  }

  setInstances(members: readonly number[], now: number): void {
    for (const r of this.replicas) r.setInstances(members, now)
  }

  close(): void {
    for (const r of this.replicas) r.close()
  }
}
