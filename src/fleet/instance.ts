// One upstream server: its connection pool, what it serves, and what we last saw of it.
import { buildConnector, H2CClient, Pool, type Dispatcher } from 'undici'
import type { Config } from '../config/config.js'
import { reportClosedUnread } from './closed-unread.js'
import { HealthState } from './health.js'
import { OutlierState } from './outlier.js'
import type { ProbeToken } from './probe-auth.js'
import type { Role } from '../config/disaggregation.js'

export type UpstreamOptions = Config['upstream']

export class Instance {
  /** The id the router hashes: the URL as configured, normalised (no trailing slash). */
  readonly id: string
  readonly url: URL
  /** Path prefix to put before request paths ('' for a bare origin). */
  readonly basePath: string
  readonly dispatcher: Dispatcher
  /**
   * Probes' own connections: a probe queued behind 150 streams in the traffic pool would
   * time out and take a busy, healthy instance out of rotation.
   */
  readonly probeDispatcher: Dispatcher
  readonly health = new HealthState()
  /** The endpoint's probe credentials (probeAuth), sent by the probes only. */
  probeToken: ProbeToken | undefined
  /** Why model discovery failed in a way worth fixing (a refused probe); cleared when it works. */
  discoveryError: string | undefined
  readonly outlier = new OutlierState()
  weight: number
  #declared: string[] = []
  // declared ∪ discovered, kept current so a request's model check is one Set lookup.
  #served = new Set<string>()
  /** From GET /v1/models; undefined until the first successful fetch. */
  discoveredModels: string[] | undefined
  /** Parent of each adapter (LoRA) in discoveredModels, from /v1/models' `parent`. */
  parents = new Map<string, string>()
  /** vllm:prefix_cache_hits_total / queries_total from the last scrape. */
  kvCacheHitRatio: number | undefined
  kvCacheBlocks: number | undefined
  /** Tokens per KV block, from vllm:cache_config_info. */
  kvBlockTokens: number | undefined
  /** Metrics probes whose page was cut at METRICS_PROBE_MAX_BYTES (shown in /admin/instances; said once). */
  metricsPagesCut = 0
  /** longest_prefix index capacity set in the config, if any. */
  indexBlocks: number | undefined
  requests = 0
  /** What it does in a disaggregated fleet (from its entry: the configuration, a flag or discovery). */
  role: Role = 'both'
  /** SGLang's connector: its bootstrap server's port (the instance's --disaggregation-bootstrap-port). */
  bootstrapPort: number | undefined
  /** How the pools are made, for oneConnection(). */
  readonly #upstream: UpstreamOptions
  readonly #common: object

  constructor(url: string, weight: number, models: string[], upstream: UpstreamOptions, indexBlocks?: number) {
    this.url = new URL(url)
    this.id = url.replace(/\/+$/, '')
    this.basePath = this.url.pathname.replace(/\/+$/, '')
    this.weight = weight
    this.declaredModels = models
    this.indexBlocks = indexBlocks
    const common = {
      connectTimeout: upstream.connectTimeoutMs,
      headersTimeout: upstream.headersTimeoutMs,
      bodyTimeout: upstream.bodyTimeoutMs,
      keepAliveTimeout: upstream.keepAliveTimeoutMs,
    }
    this.#upstream = upstream
    this.#common = common
    this.dispatcher = pool(this.url.origin, upstream, common, upstream.connections)
    // One stream each for the router's periodic reads of an instance (health probe, /v1/models,
    // the engine-load scrape of /metrics), so none waits in an h2c client's queue: undici
    // writes a queued request onto a session that an aborted stream has just destroyed, and
    // that throws outside any request (seen: serve crashed against an HTTP/1-only server).
    this.probeDispatcher = pool(this.url.origin, upstream, common, PERIODIC_READS)
  }

  /** A pool of one new connection, as the traffic pool's: the caller closes it. */
  oneConnection(): Dispatcher {
    return pool(this.url.origin, this.#upstream, this.#common, 1)
  }

  /** Passes health probes (or has not failed enough of them yet). */
  get healthy(): boolean {
    return this.health.healthy
  }

  /** Healthy and not ejected: what the router may choose. */
  get inRotation(): boolean {
    return this.health.healthy && !this.outlier.ejected
  }

  /** What is wrong with it: why it is down, else why its models cannot be discovered. */
  get lastError(): string | undefined {
    return this.health.lastError ?? this.discoveryError
  }

  get declaredModels(): string[] {
    return this.#declared
  }

  set declaredModels(models: string[]) {
    this.#declared = models
    this.#served = new Set([...models, ...(this.discoveredModels ?? [])])
  }

  /** Names this instance answers to; empty when nothing is known (it then takes any model). */
  models(): string[] {
    return [...this.#served]
  }

  serves(model: string): boolean {
    return this.#served.has(model)
  }

  /**
   * Blocks of `blockSize` bytes of routing text the longest_prefix index should remember for
   * this instance: the configured number, else its KV capacity (num_gpu_blocks × block_size
   * tokens, at about 4 bytes of text per token), else undefined (the router's default).
   */
  indexCapacity(blockSize: number): number | undefined {
    if (this.indexBlocks !== undefined) return this.indexBlocks
    if (this.kvCacheBlocks === undefined) return undefined
    return Math.max(1, Math.round((this.kvCacheBlocks * (this.kvBlockTokens ?? 16) * 4) / blockSize))
  }

  setDiscoveredModels(m: { ids: string[]; parents: Map<string, string> }): void {
    this.discoveredModels = m.ids
    this.parents = m.parents
    this.#served = new Set([...this.#declared, ...m.ids])
  }

  knowsModels(): boolean {
    return this.declaredModels.length > 0 || this.discoveredModels !== undefined
  }

  /**
   * Traffic finishes first (close waits for what is in flight); a probe or scrape does not:
   * nobody waits for its answer, and one the instance never answers would hold the close (a
   * shutdown) for the whole probe timeout.
   */
  async close(): Promise<void> {
    await Promise.all([this.dispatcher.close().catch(() => undefined), this.probeDispatcher.destroy().catch(() => undefined)])
  }
}

/** Requests the router's own periodic reads keep in flight at one instance: health, models, engine load. */
const PERIODIC_READS = 3

function pool(origin: string, upstream: UpstreamOptions, common: object, connections: number): Dispatcher {
  if (upstream.protocol === 'h2c') {
    // Prior-knowledge HTTP/2 over cleartext: one connection, many concurrent streams.
    return new H2CClient(origin, { ...common, pipelining: connections, maxConcurrentStreams: connections } as H2CClient.Options)
  }
  if (upstream.protocol === 'h2') return new Pool(origin, { ...common, connections, allowH2: true })
  // HTTP/1.1: a connection carries one request at a time, so a reset after the instance's FIN
  // can only answer the request being written (closed-unread.ts). undici ignores
  // connectTimeout when given a connector: the connector takes it.
  const connect = reportClosedUnread(buildConnector({ timeout: upstream.connectTimeoutMs }))
  return new Pool(origin, { ...common, connections, connect })
}
