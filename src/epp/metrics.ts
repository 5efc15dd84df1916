// The endpoint picker's own metrics, beside serve's (the RouterMetrics registry it reuses for
// requests, decisions, overflow, time to first byte and the in-flight gauges).
import { Counter, Gauge, type Registry } from 'prom-client'

export class EppMetrics {
  /** ext_proc streams open now. */
  readonly streams: Gauge
  /** Responses whose gateway reported an endpoint served other than the one picked. */
  readonly servedElsewhere: Counter<'endpoint'>
  /** Streams that ended, by how: response (the response path ended), cut (before it did), immediate (the picker answered). */
  readonly ended: Counter<'how'>
  /** Gateway connections asked to reconnect (graceful GOAWAY), by why. */
  readonly goaways: Counter<'reason'>

  constructor(registry: Registry, open: () => number) {
    this.streams = new Gauge({
      name: 'prefix_router_epp_streams',
      help: 'ext_proc streams open (one per request the gateway is asking about).',
      registers: [registry],
      collect() {
        this.set(open())
      },
    })
    this.servedElsewhere = new Counter({
      name: 'prefix_router_epp_served_elsewhere_total',
      help: 'Responses whose x-gateway-destination-endpoint-served differs from the endpoint picked (the gateway went down the list, or ignored it).',
      labelNames: ['endpoint'],
      registers: [registry],
    })
    this.ended = new Counter({
      name: 'prefix_router_epp_streams_ended_total',
      help: 'ext_proc streams ended, by how: response (the response path ended), cut (the stream ended first), immediate (the picker answered the client itself).',
      labelNames: ['how'],
      registers: [registry],
    })
    this.goaways = new Counter({
      name: 'prefix_router_epp_goaways_total',
      help: "Gateway connections the picker asked to reconnect (graceful GOAWAY), by reason: stream_resets (the gateway's stream resets neared Node's HTTP/2 limit, which would end the connection with its streams).",
      labelNames: ['reason'],
      registers: [registry],
    })
    this.goaways.inc({ reason: 'stream_resets' }, 0)
  }
}
