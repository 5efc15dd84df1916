// The exact view's metrics, read at scrape time from each endpoint's view and router: nothing
// is counted on the event path itself.
import { Counter, Gauge, type Registry } from 'prom-client'
import type { Router } from '../../core/router.js'
import type { ExactView, InstanceView } from './exact-view.js'

/** What these metrics read of an endpoint: defined here, so that the view does not import its owner. */
export interface ExactViewSource {
  readonly name: string
  readonly exact: Pick<ExactView, 'ids' | 'status'> | undefined
  readonly router: Pick<Router, 'stats'>
}

type Each = (ep: ExactViewSource, id: string, v: InstanceView) => void

function eachView(endpoints: () => Iterable<ExactViewSource>, fn: Each): void {
  for (const ep of endpoints()) {
    const x = ep.exact
    if (x === undefined) continue
    for (const id of x.ids()) {
      const v = x.status(id)
      if (v !== undefined) fn(ep, id, v)
    }
  }
}

const sum = (v: InstanceView, f: (p: InstanceView['publishers'][number]) => number) => v.publishers.reduce((n, p) => n + f(p), 0)

export function registerKvEventMetrics(endpoints: () => Iterable<ExactViewSource>, registers: Registry[]): void {
  const counter = (name: string, help: string, f: (p: InstanceView['publishers'][number]) => number) =>
    new Counter({
      name,
      help,
      labelNames: ['endpoint', 'instance'],
      registers,
      collect() {
        this.reset()
        eachView(endpoints, (ep, id, v) => this.inc({ endpoint: ep.name, instance: id }, sum(v, f)))
      },
    })
  counter('prefix_router_kv_event_batches_total', "KV-event batches received from each instance's publishers (vLLM's ZeroMQ stream), replayed ones included.", (p) => p.batches)
  counter('prefix_router_kv_events_total', 'KV events (BlockStored, BlockRemoved, AllBlocksCleared) received from each instance.', (p) => p.events)
  counter(
    'prefix_router_kv_events_undecodable_total',
    'KV-event messages or events that could not be used, per instance: messages with the wrong framing, bad msgpack or over kvEvents.maxMessageBytes, and events that are malformed (no or mismatched tokens, block_size 0, negative ids, token ids past 2^32-1) or of an unknown type.',
    (p) => p.undecodable + p.oversized + p.malformedEvents + p.unknownEvents,
  )
  counter('prefix_router_kv_event_gaps_total', 'Gaps in an instance\'s event sequence numbers (lost batches), replayed or not.', (p) => p.gaps)
  counter('prefix_router_kv_event_replays_total', "Requests to an instance's replay socket for missed batches.", (p) => p.replays)
  new Counter({
    name: 'prefix_router_kv_view_rebuilds_total',
    help: "Views rebuilt from an instance's replay buffer on joining its event stream; complete=\"false\": the buffer no longer reached back to the engine's first batch, so the view is a subset of its cache.",
    labelNames: ['endpoint', 'instance', 'complete'],
    registers,
    collect() {
      this.reset()
      eachView(endpoints, (ep, id, v) => {
        const all = sum(v, (p) => p.rebuilds)
        const partial = sum(v, (p) => p.partialRebuilds)
        if (all > partial) this.inc({ endpoint: ep.name, instance: id, complete: 'true' }, all - partial)
        if (partial > 0) this.inc({ endpoint: ep.name, instance: id, complete: 'false' }, partial)
      })
    },
  })
  counter('prefix_router_kv_event_restarts_total', "Engine restarts seen in an instance's event stream (its sequence went back to 0).", (p) => p.restarts)
  new Counter({
    name: 'prefix_router_kv_blocks_skipped_total',
    help: 'Blocks in KV events the exact index did not take, by reason: orphan (parent unknown), group (another KV-cache group), extra_keys (multimodal or embedding keys), block_size, capacity (index full), malformed, not_member.',
    labelNames: ['endpoint', 'instance', 'reason'],
    registers,
    collect() {
      this.reset()
      eachView(endpoints, (ep, id, v) => {
        for (const [reason, n] of Object.entries(v.applied.skipped)) this.inc({ endpoint: ep.name, instance: id, reason }, n)
      })
    },
  })
  new Gauge({
    name: 'prefix_router_kv_view_fresh',
    help: "1 while the router trusts an instance's exact view (its event stream is whole); 0 while it routes for it on the approximate estimate.",
    labelNames: ['endpoint', 'instance'],
    registers,
    collect() {
      this.reset()
      eachView(endpoints, (ep, id, v) => this.set({ endpoint: ep.name, instance: id }, v.view === 'fresh' ? 1 : 0))
    },
  })
  new Gauge({
    name: 'prefix_router_kv_view_blocks',
    help: 'Blocks the exact view holds per instance, by tier: gpu, offloaded (CPU or a connector such as LMCache), pending (routed there, not yet reported stored).',
    labelNames: ['endpoint', 'instance', 'tier'],
    registers,
    collect() {
      this.reset()
      eachView(endpoints, (ep, id, v) => {
        this.set({ endpoint: ep.name, instance: id, tier: 'gpu' }, v.gpuBlocks)
        this.set({ endpoint: ep.name, instance: id, tier: 'offloaded' }, v.offloadedBlocks)
        this.set({ endpoint: ep.name, instance: id, tier: 'pending' }, v.pendingBlocks)
      })
    },
  })
  const index = (name: string, help: string, f: (s: ReturnType<Router['stats']>) => number) =>
    new Gauge({
      name,
      help,
      labelNames: ['endpoint'],
      registers,
      collect() {
        this.reset()
        for (const ep of endpoints()) if (ep.exact !== undefined) this.set({ endpoint: ep.name }, f(ep.router.stats()))
      },
    })
  index('prefix_router_exact_index_entries', 'Entries in the native exact index (blocks held, per instance and tier, and pending ones).', (s) => s.exactEntries)
  index('prefix_router_exact_index_capacity', 'The exact index\'s bound in entries (routing.exactCapacity): stores beyond it are dropped and counted.', (s) => s.exactCapacity)
  index('prefix_router_exact_index_memory_bytes', "The exact index's memory, estimated from its tables' sizes.", (s) => s.exactMemoryBytes)
}
