// `prefix-router replay`'s engine: one pass over the requests, each prepared once and fed
// to every strategy's lane in lockstep (so memory stays at what is in flight, and a run
// of N strategies costs one prompt hashing, not N), then the lanes drain and the
// measurements become a ReplayResult.
import type { SimOptions } from '../sim/config.js'
import { resolveSim } from '../sim/config.js'
import { IdealCache } from './ideal.js'
import { Lane, type ScaleEvent } from './lane.js'
import { prepareRequest } from './prepare.js'
import { summarize, type ReplayResult } from './result.js'
import type { RouterFactory } from './routers.js'
import type { TimedRequest } from './types.js'

export interface ReplayOptions {
  requests: Iterable<TimedRequest> | AsyncIterable<TimedRequest>
  /** What produced the requests, for the report. */
  source: ReplayResult['source']
  strategies: readonly RouterFactory[]
  instances: number
  durationMs: number
  sim: SimOptions
  prefixLength: number
  concurrencyThreshold: number
  routerReplicas: number
  seed: number
  events: readonly ScaleEvent[]
  /** Window of the moved-share and recovery measurements (default 60 s). */
  windowMs?: number
  /** Called now and then with the simulated time reached. */
  onProgress?: (simMs: number, requests: number) => void
}

export async function runReplay(o: ReplayOptions): Promise<ReplayResult> {
  const started = performance.now()
  const resolved = resolveSim(o.sim)
  const windowMs = o.windowMs ?? 60_000
  const events = [...o.events].filter((e) => e.atMs < o.durationMs).sort((a, b) => a.atMs - b.atMs)
  const engines = o.instances + events.filter((e) => e.kind === 'add').length
  const lanes = o.strategies.map(
    (f) =>
      new Lane(f, {
        instances: o.instances,
        engines,
        sim: o.sim,
        prefixLength: o.prefixLength,
        concurrencyThreshold: o.concurrencyThreshold,
        replicas: o.routerReplicas,
        seed: o.seed,
        durationMs: o.durationMs,
        events,
        windowMs,
      }),
  )
  const ideal = new IdealCache(o.instances * resolved.engine.kvBlocks, resolved.engine.blockSize)
  const prep = {
    model: resolved.model,
    blockSize: resolved.engine.blockSize,
    ...(events.length > 0 ? { trackKeys: o.prefixLength } : {}),
  }
  let next = 0
  let index = 0
  try {
    for await (const r of o.requests) {
      if (r.at >= o.durationMs) break
      while (next < events.length && events[next]!.atMs <= r.at) {
        for (const lane of lanes) lane.scale(events[next]!)
        next++
      }
      const p = prepareRequest(r, index++, prep)
      ideal.observe(p.prompt)
      for (const lane of lanes) lane.arrive(p)
      if ((index & 255) === 0) o.onProgress?.(r.at, index)
    }
    for (; next < events.length; next++) for (const lane of lanes) lane.scale(events[next]!)
    o.onProgress?.(o.durationMs, index)
    for (const lane of lanes) lane.drain()
    return summarize({
      options: o,
      lanes,
      events,
      windowMs,
      idealHitRate: ideal.hitRate,
      idealCapacityBlocks: o.instances * resolved.engine.kvBlocks,
      requests: index,
      wallMs: performance.now() - started,
      profile: resolved.profile.name,
    })
  } finally {
    for (const lane of lanes) lane.close()
  }
}
