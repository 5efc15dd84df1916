// The router's Prometheus metrics (prom-client), one registry per server so that several
// servers in one process (tests, embedded gateways) do not share counters.
import { collectDefaultMetrics, Counter, Gauge, Registry } from 'prom-client'
import { BoundCounter, BoundHistogram } from './bound-metrics.js'
import type { Endpoint } from '../fleet/endpoint.js'
import { registerKvEventMetrics } from '../fleet/events/metrics.js'
import { registerEngineLoadMetrics } from '../fleet/load/metrics.js'
import { PdMetrics } from './pd-metrics.js'
import { registerRoleMetrics } from './role-metrics.js'

export class RouterMetrics {
  readonly registry = new Registry()
  // Updated by every request: label values in labelNames order (see bound-metrics.ts).
  readonly requests: BoundCounter<'endpoint' | 'instance' | 'strategy' | 'status'>
  readonly healthChecks: BoundCounter<'path' | 'status'>
  readonly decision: BoundHistogram<'strategy'>
  readonly ttfb: BoundHistogram<'instance'>
  readonly duration: BoundHistogram<'endpoint' | 'status'>
  readonly overflow: Counter<'instance'>
  readonly retries: Counter<'instance' | 'reason'>
  readonly ejections: Counter<'instance' | 'reason'>
  readonly tokenize: BoundHistogram<'result'>
  /** Disaggregated endpoints' requests and legs. */
  readonly pd: PdMetrics

  /**
   * `fleet`: whether this process reports the fleet's gauges (instance health, ejection,
   * KV-cache ratio, the shared in-flight counters). Off in a cluster worker: the primary,
   * which probes and sees the same shared state, reports them once for all.
   * `processMetrics` off for a throwaway registry: the GC observer and event-loop monitor they
   * start are never stopped.
   */
  constructor(
    endpoints: () => Iterable<Endpoint>,
    front: () => { openConnections(): number; readonly refused: number } | undefined = () => undefined,
    opts: { processMetrics?: boolean | undefined; fleet?: boolean } = {},
  ) {
    const registers = [this.registry]
    const fleetRegisters = opts.fleet !== false ? registers : []
    // The process's own: resident memory, heap, event-loop lag, descriptors, GC time.
    if (opts.processMetrics !== false) collectDefaultMetrics({ register: this.registry })
    this.requests = new BoundCounter({
      name: 'prefix_router_requests_total',
      help: 'Requests answered, by endpoint, instance (empty when none was chosen), strategy and HTTP status; /ping and /health are in prefix_router_health_checks_total.',
      labelNames: ['endpoint', 'instance', 'strategy', 'status'],
      registers,
    })
    // Apart from requests: a load balancer's checks every few seconds would outnumber a quiet
    // fleet's traffic, and show as answered requests that no client sent.
    this.healthChecks = new BoundCounter({
      name: 'prefix_router_health_checks_total',
      help: 'Answers to /ping and /health (load balancer and orchestrator checks), by path and HTTP status; prefix_router_requests_total does not count them.',
      labelNames: ['path', 'status'],
      registers,
    })
    this.decision = new BoundHistogram({
      name: 'prefix_router_routing_decision_seconds',
      help: 'Time to choose an instance: key extraction excluded (for chat and completions bodies read natively, the key and block-chain hashing too, done during the body scan), the native pick (ring lookup, strategy, lease) included.',
      labelNames: ['strategy'],
      // From a quarter of a microsecond: a pick with a short key takes well under one.
      buckets: [2.5e-7, 5e-7, 1e-6, 2e-6, 5e-6, 1e-5, 2e-5, 5e-5, 1e-4, 5e-4, 1e-3],
      registers,
    })
    this.overflow = new Counter({
      name: 'prefix_router_overflow_total',
      help: "Requests sent to another instance because the prefix's own was at the concurrency threshold, by the instance that took them.",
      labelNames: ['instance'],
      registers,
    })
    this.ttfb = new BoundHistogram({
      name: 'prefix_router_upstream_ttfb_seconds',
      help: "Time from sending a request upstream to its first response body byte: the router's view of TTFT.",
      labelNames: ['instance'],
      buckets: [0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30],
      registers,
    })
    this.duration = new BoundHistogram({
      name: 'prefix_router_request_duration_seconds',
      help: 'Time from the request arriving to the end of the response.',
      labelNames: ['endpoint', 'status'],
      buckets: [0.005, 0.01, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60, 120],
      registers,
    })
    this.retries = new Counter({
      name: 'prefix_router_retries_total',
      help: 'Requests tried again on another instance, by the instance whose try failed and why (connect, 502, 503, 504, timeout, reset).',
      labelNames: ['instance', 'reason'],
      registers,
    })
    this.ejections = new Counter({
      name: 'prefix_router_ejections_total',
      help: 'Instances taken out of rotation by outlier detection, by instance and reason (consecutive_5xx, consecutive_gateway_failure).',
      labelNames: ['instance', 'reason'],
      registers,
    })
    this.tokenize = new BoundHistogram({
      name: 'prefix_router_tokenize_seconds',
      help: "The exact view: time to have a request's token ids before its pick, by result (ok; fallback: not tokenizable, failed or late, routed on the approximate view).",
      labelNames: ['result'],
      buckets: [1e-5, 5e-5, 1e-4, 2.5e-4, 5e-4, 1e-3, 2.5e-3, 5e-3, 0.01, 0.025, 0.05, 0.1, 0.25],
      registers,
    })
    this.pd = new PdMetrics(registers)
    registerKvEventMetrics(endpoints, registers)
    // The primary reads the engines for the host: its figures are the fleet's.
    registerEngineLoadMetrics(endpoints, fleetRegisters)
    // Membership and health are the primary's to report, as the gauges below.
    registerRoleMetrics(endpoints, fleetRegisters)
    new Gauge({
      name: 'prefix_router_front_connections',
      help: 'Client connections open on the front port (limits.maxConnections caps them).',
      registers,
      collect() {
        this.set(front()?.openConnections() ?? 0)
      },
    })
    new Counter({
      name: 'prefix_router_front_connections_refused_total',
      help: 'Client connections closed as they were accepted, because limits.maxConnections were open.',
      registers,
      collect() {
        this.reset()
        this.inc(front()?.refused ?? 0)
      },
    })
    new Gauge({
      name: 'prefix_router_in_flight',
      help: 'Requests in flight per instance (the native counters the router routes by).',
      labelNames: ['endpoint', 'instance'],
      registers: fleetRegisters,
      collect() {
        this.reset()
        for (const ep of endpoints()) for (const i of ep.router.instances()) this.set({ endpoint: ep.name, instance: i.id }, i.inFlight)
      },
    })
    new Counter({
      name: 'prefix_router_leases_collected_total',
      help: 'Leases the garbage collector found unreleased and released: each one is a request whose end the router missed (a bug to report), counted in the routing state.',
      labelNames: ['endpoint'],
      registers: fleetRegisters,
      collect() {
        this.reset()
        for (const ep of endpoints()) this.inc({ endpoint: ep.name }, ep.router.stats().leasesCollected)
      },
    })
    new Gauge({
      name: 'prefix_router_instance_kv_cache_hit_ratio',
      help: "Each instance's prefix-cache hit ratio, vllm:prefix_cache_hits_total / vllm:prefix_cache_queries_total from its /metrics.",
      labelNames: ['endpoint', 'instance'],
      registers: fleetRegisters,
      collect() {
        this.reset()
        for (const ep of endpoints()) {
          for (const i of ep.instances.values()) if (i.kvCacheHitRatio !== undefined) this.set({ endpoint: ep.name, instance: i.id }, i.kvCacheHitRatio)
        }
      },
    })
    new Gauge({
      name: 'prefix_router_instance_healthy',
      help: '1 when the instance passes health checks and is not ejected: it receives traffic.',
      labelNames: ['endpoint', 'instance'],
      registers: fleetRegisters,
      collect() {
        this.reset()
        for (const ep of endpoints()) for (const i of ep.instances.values()) this.set({ endpoint: ep.name, instance: i.id }, i.inRotation ? 1 : 0)
      },
    })
    new Gauge({
      name: 'prefix_router_instance_ejected',
      help: '1 while outlier detection keeps the instance out of rotation.',
      labelNames: ['endpoint', 'instance'],
      registers: fleetRegisters,
      collect() {
        this.reset()
        for (const ep of endpoints()) for (const i of ep.instances.values()) this.set({ endpoint: ep.name, instance: i.id }, i.outlier.ejected ? 1 : 0)
      },
    })
  }
}
