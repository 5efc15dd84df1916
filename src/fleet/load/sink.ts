// Where the figures scraped from the engines go: the endpoint's router, or in tests anything
// that keeps them.

export interface EngineLoadSink {
  /**
   * The load at instance `id` that this router's own counters do not see: requests in flight
   * there from other clients, and their queued prefill in the router's blocks (0: the engines
   * do not report it). (0, 0) is "no external knowledge". False for an unknown id.
   */
  setEngineLoad(id: string, inFlight: number, prefillBlocks: number): boolean
  /** This router's own requests in flight at `id` (in a cluster: every process's, the shared counters). */
  inFlight(id: string): number
}

/** How one scrape ended, as counted in prefix_router_engine_load_scrapes_total{result}. */
export type ScrapeResult = 'ok' | 'failed' | 'late' | 'not_vllm'
export const SCRAPE_RESULTS: readonly ScrapeResult[] = ['ok', 'failed', 'late', 'not_vllm']
