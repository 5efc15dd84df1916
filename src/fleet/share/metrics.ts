// The sharing's metrics, read from the ShareLoad at scrape time.
import { Counter, Gauge, type Registry } from 'prom-client'
import { MAX_PEERS } from './peers.js'
import type { ShareLoad } from './share-load.js'

export function registerShareLoadMetrics(share: () => ShareLoad | undefined, registers: Registry[]): void {
  new Gauge({
    name: 'prefix_router_share_load_peers',
    help: 'Other router replicas heard from on the share-load channel within expireMs; every replica of K should show K-1.',
    registers,
    collect() {
      this.set(share()?.peerCount() ?? 0)
    },
  })
  new Gauge({
    name: 'prefix_router_share_load_connected',
    help: '1 while both Redis connections of the share-load (publish, subscribe) are up.',
    registers,
    collect() {
      this.set(share()?.connected === true ? 1 : 0)
    },
  })
  new Counter({
    name: 'prefix_router_share_load_messages_total',
    help: `Share-load messages: sent (taken by Redis), received (from other replicas), dropped (malformed), refused (from a new replica id while ${MAX_PEERS} others count).`,
    labelNames: ['direction'],
    registers,
    collect() {
      this.reset()
      const c = share()?.counts
      this.inc({ direction: 'sent' }, c?.sent ?? 0)
      this.inc({ direction: 'received' }, c?.received ?? 0)
      this.inc({ direction: 'dropped' }, c?.dropped ?? 0)
      this.inc({ direction: 'refused' }, c?.refused ?? 0)
    },
  })
  new Counter({
    name: 'prefix_router_share_load_connection_failures_total',
    help: 'Times the share-load lost its Redis connection, or at start could not make it.',
    registers,
    collect() {
      this.reset()
      this.inc(share()?.counts.connectionFailures ?? 0)
    },
  })
}
