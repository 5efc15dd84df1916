// Load from the engines, as Prometheus sees it: read at scrape time from each endpoint's
// scraper, so nothing is counted on the scrape path itself.
import { Counter, Gauge, type Registry } from 'prom-client'
import type { Router } from '../../core/router.js'
import type { EngineLoadScraper, EngineLoadStatus } from './scraper.js'
import { SCRAPE_RESULTS } from './sink.js'

/** What these metrics read of an endpoint: defined here, so that the scraper's side does not import the endpoint. */
export interface EngineLoadSource {
  readonly name: string
  readonly load: Pick<EngineLoadScraper, 'ids' | 'status'> | undefined
  readonly router: Pick<Router, 'inFlight'>
}

type Each = (ep: EngineLoadSource, id: string, s: EngineLoadStatus) => void

function eachStatus(endpoints: () => Iterable<EngineLoadSource>, fn: Each): void {
  for (const ep of endpoints()) {
    const l = ep.load
    if (l === undefined) continue
    for (const id of l.ids()) {
      const s = l.status(id)
      if (s !== undefined) fn(ep, id, s)
    }
  }
}

export function registerEngineLoadMetrics(endpoints: () => Iterable<EngineLoadSource>, registers: Registry[]): void {
  new Gauge({
    name: 'prefix_router_engine_load_requests',
    help:
      "Load from the engines, per instance: source=engine, requests running plus waiting as the engine's /metrics said at the last scrape; " +
      'source=external, what the router adds to its own count for it (the engine\'s figure less this router\'s requests there at that scrape; 0 while the fallback is in force); ' +
      "source=own, this router's own requests in flight there now.",
    labelNames: ['endpoint', 'instance', 'source'],
    registers,
    collect() {
      this.reset()
      eachStatus(endpoints, (ep, id, s) => {
        if (s.running !== null && s.waiting !== null) this.set({ endpoint: ep.name, instance: id, source: 'engine' }, s.running + s.waiting)
        this.set({ endpoint: ep.name, instance: id, source: 'external' }, s.external)
        this.set({ endpoint: ep.name, instance: id, source: 'own' }, ep.router.inFlight(id))
      })
    },
  })
  new Counter({
    name: 'prefix_router_engine_load_scrapes_total',
    help: "Scrapes of each instance's /metrics for its load, by result: ok; failed (connection error, not 200, a gauge missing or not a number); late (no answer in time); not_vllm (no vllm:num_requests_running: read rarely after that).",
    labelNames: ['endpoint', 'instance', 'result'],
    registers,
    collect() {
      this.reset()
      eachStatus(endpoints, (ep, id, s) => {
        for (const result of SCRAPE_RESULTS) this.inc({ endpoint: ep.name, instance: id, result }, s.scrapes[result])
      })
    },
  })
  new Gauge({
    name: 'prefix_router_engine_load_age_seconds',
    help: "Time since an instance's /metrics last answered with its load (absent before the first answer).",
    labelNames: ['endpoint', 'instance'],
    registers,
    collect() {
      this.reset()
      eachStatus(endpoints, (ep, id, s) => s.ageMs !== null && this.set({ endpoint: ep.name, instance: id }, s.ageMs / 1000))
    },
  })
  new Gauge({
    name: 'prefix_router_engine_load_fallback',
    help: "1 while the router routes on its own counts for an instance (no scrape answered yet, the last one failed or was late, or its /metrics is not vLLM's); 0 while the engine's figure is in force.",
    labelNames: ['endpoint', 'instance'],
    registers,
    collect() {
      this.reset()
      eachStatus(endpoints, (ep, id, s) => this.set({ endpoint: ep.name, instance: id }, s.fallback ? 1 : 0))
    },
  })
  new Gauge({
    name: 'prefix_router_engine_kv_cache_usage',
    help: "Each instance's KV-cache usage (0-1), vllm:kv_cache_usage_perc at the last scrape (the fullest engine's, for data-parallel engines).",
    labelNames: ['endpoint', 'instance'],
    registers,
    collect() {
      this.reset()
      eachStatus(endpoints, (ep, id, s) => s.kvCacheUsage !== null && this.set({ endpoint: ep.name, instance: id }, s.kvCacheUsage))
    },
  })
}
