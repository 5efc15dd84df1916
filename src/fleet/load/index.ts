// Load from the engines: their /metrics gauges scraped into the router (see scraper.ts).
export { ENGINE_LOAD_INTERVAL, ENGINE_LOAD_INTERVAL_MS, ENGINE_LOAD_MODES, EngineLoadSchema, NOT_VLLM_INTERVAL_MS, scrapes, staleAfter, STALE_INTERVALS, type EngineLoadConfig, type EngineLoadMode } from '../../config/engine-load.js'
export { readEngineGauges, type EngineGauges, type GaugeRead } from './gauges.js'
export { Family, scanSamples, sumSamples, type Samples } from './samples.js'
export { EngineLoadScraper, type EngineLoadStatus, type LoadState, type ScraperOptions, type ScrapeTarget } from './scraper.js'
export { SCRAPE_RESULTS, type EngineLoadSink, type ScrapeResult } from './sink.js'
