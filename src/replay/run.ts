// `prefix-router replay`'s engine: one pass over the requests, each prepared once and fed
// to every strategy's lane in lockstep (so memory stays at what is in flight, and a run
// of N strategies costs one prompt hashing, not N), then the lanes drain and the
// measurements become a ReplayResult. With `clients`, the load is closed-loop instead
// (src/replay/closed-loop.ts): the lanes advance side by side in steps of simulated time.
import { resolveSim } from '../sim/config.js'
import { outputPlan } from '../sim/request.js'
import { SharedRequests } from './closed-loop.js'
import { IdealCache } from './ideal.js'
import { DEFAULT_ENGINE_LOAD_INTERVAL_MS, DEFAULT_KV_EVENTS_DELAY_MS, DEFAULT_SHARE_LOAD_DELAY_MS, DEFAULT_SHARE_LOAD_INTERVAL_MS, Lane, type ScaleEvent } from './lane.js'
import { prepareRequest, type PreparedRequest } from './prepare.js'
import { summarize, type ReplayResult } from './result.js'
import type { ReplayOptions } from './options.js'
import type { RouterFactory } from './routers.js'

export async function runReplay(o: ReplayOptions): Promise<ReplayResult> {
  const started = performance.now()
  const resolved = resolveSim(o.sim)
  const windowMs = o.windowMs ?? 60_000
  const events = [...o.events].filter((e) => e.atMs < o.durationMs).sort((a, b) => a.atMs - b.atMs)
  const engines = o.instances + events.filter((e) => e.kind === 'add').length
  const lane = (f: RouterFactory, replicas: number): Lane =>
      new Lane(f, {
        instances: o.instances,
        engines,
        sim: o.sim,
        prefixLength: o.prefixLength,
        concurrencyThreshold: o.concurrencyThreshold,
        replicas,
        seed: o.seed,
        durationMs: o.durationMs,
        events,
        windowMs,
        kvEventsDelayMs: o.kvEventsDelayMs ?? DEFAULT_KV_EVENTS_DELAY_MS,
        engineLoadIntervalMs: o.engineLoadIntervalMs ?? DEFAULT_ENGINE_LOAD_INTERVAL_MS,
        shareLoadIntervalMs: o.shareLoadIntervalMs ?? DEFAULT_SHARE_LOAD_INTERVAL_MS,
        shareLoadDelayMs: o.shareLoadDelayMs ?? DEFAULT_SHARE_LOAD_DELAY_MS,
        keepRequests: (o.phases?.length ?? 0) > 0,
      })
  const replicated = o.strategies.map((f) => lane(f, o.routerReplicas))
  // The same strategies with one router each, fed the same requests: what the replicas cost.
  const oneRouter = o.routerReplicas > 1 && o.compareOneRouter !== false ? o.strategies.map((f) => lane(f, 1)) : []
  const lanes = [...replicated, ...oneRouter]
  // Every engine that is ever in the fleet (added ones too) can hold blocks at the same time.
  const idealCapacity = engines * resolved.engine.kvBlocks
  const ideal = new IdealCache(idealCapacity, resolved.engine.blockSize)
  // A request the engines refuse reaches no cache and no lane counts its tokens.
  const probe = lanes[0]?.fleet
  const served = (p: PreparedRequest): boolean => {
    if (probe === undefined) return true
    const n = p.prompt.promptTokens
    return probe.engines[0]!.check(n, outputPlan(probe.sim, n, p.maxTokens).maxTokens) === undefined
  }
  const prep = {
    model: resolved.model,
    blockSize: resolved.engine.blockSize,
    tokenizer: resolved.tokenizer,
    ...(events.length > 0 ? { trackKeys: o.prefixLength } : {}),
    withTokens: lanes.some((l) => l.wantsKvEvents),
  }
  let next = 0
  let index = 0
  try {
    if (o.clients !== undefined) {
      if (events.length > 0) throw new RangeError('closed-loop replay does not take scale events')
      if (!(Symbol.iterator in o.requests)) throw new RangeError('closed-loop replay needs a synchronous Iterable of requests')
      const shared = new SharedRequests(o.requests, prep, (p) => ideal.observe(p.prompt, served(p)))
      for (const lane of lanes) lane.startClosedLoop((i) => shared.get(i), o.clients, o.durationMs)
      for (let t = 0; t < o.durationMs; ) {
        t = Math.min(t + CLOSED_LOOP_STEP_MS, o.durationMs)
        for (const lane of lanes) lane.fleet.run(t)
        shared.release(Math.min(...lanes.map((l) => l.drawn)))
        o.onProgress?.(t, shared.prepared)
      }
      index = shared.prepared
    } else {
      index = await openLoop()
    }
    for (const lane of lanes) lane.drain()
    return summarize({
      options: o,
      lanes: replicated,
      oneRouterLanes: oneRouter,
      events,
      windowMs,
      idealHitRate: ideal.hitRate,
      // Closed loop: each lane sent its own number of requests and is held to the bound over those.
      ...(o.clients !== undefined && { laneIdealHitRates: lanes.map((l) => ideal.hitRateOf(l.drawn)) }),
      idealCapacityBlocks: idealCapacity,
      requests: index,
      wallMs: performance.now() - started,
      profile: resolved.profile.name,
      tokenizer: resolved.tokenizer,
      kvEventsDelayMs: o.kvEventsDelayMs ?? DEFAULT_KV_EVENTS_DELAY_MS,
      engineLoadIntervalMs: o.engineLoadIntervalMs ?? DEFAULT_ENGINE_LOAD_INTERVAL_MS,
      shareLoadIntervalMs: o.shareLoadIntervalMs ?? DEFAULT_SHARE_LOAD_INTERVAL_MS,
      shareLoadDelayMs: o.shareLoadDelayMs ?? DEFAULT_SHARE_LOAD_DELAY_MS,
    })
  } finally {
    for (const lane of lanes) lane.close()
  }

  async function openLoop(): Promise<number> {
    for await (const r of o.requests) {
      if (r.at >= o.durationMs) break
      while (next < events.length && events[next]!.atMs <= r.at) {
        for (const lane of lanes) lane.scale(events[next]!)
        next++
      }
      const p = prepareRequest(r, index++, prep)
      ideal.observe(p.prompt, served(p))
      for (const lane of lanes) lane.arrive(p)
      if ((index & 255) === 0) o.onProgress?.(r.at, index)
    }
    for (; next < events.length; next++) for (const lane of lanes) lane.scale(events[next]!)
    o.onProgress?.(o.durationMs, index)
    return index
  }
}

/** Closed loop: how far the lanes advance between releases of shared requests. */
const CLOSED_LOOP_STEP_MS = 1000
