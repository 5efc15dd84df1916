// Disaggregated serving's metrics: how requests ran (two legs, or whole on the decode
// instance and why), what failed on the prefill legs, and how long each leg took.
import { Counter, Histogram, type Registry } from 'prom-client'

export class PdMetrics {
  readonly requests: Counter<'endpoint' | 'path'>
  readonly prefillFailures: Counter<'endpoint' | 'instance' | 'reason'>
  readonly decodeRetries: Counter<'endpoint' | 'params'>
  readonly legSeconds: Histogram<'endpoint' | 'leg'>

  constructor(registers: Registry[]) {
    this.requests = new Counter({
      name: 'prefix_router_pd_requests_total',
      help:
        'Requests to disaggregated endpoints, by how they ran: disaggregated (prefill leg, then decode leg), short_uncached (whole on the decode instance, which lacked less than the threshold: a skipped prefill), ' +
        'prefill_busier (whole on the decode instance past the threshold: the prefill instances had more queued, within decodePrefillCap), ' +
        'no_prefill_instance (whole on the decode instance: none could prefill), prefill_failed (whole on the decode instance after the prefill tries failed).',
      labelNames: ['endpoint', 'path'],
      registers,
    })
    this.prefillFailures = new Counter({
      name: 'prefix_router_pd_prefill_failures_total',
      help:
        'Prefill legs that gave no usable KV parameters, by instance and reason: connect, timeout, reset, an HTTP status (503, 400, ...), missing_params (answered without kv_transfer_params: ' +
        'no KV connector?), malformed_params, streamed_answer (answered with an event stream), decode_refused (the decode instance refused the parameters).',
      labelNames: ['endpoint', 'instance', 'reason'],
      registers,
    })
    this.decodeRetries = new Counter({
      name: 'prefix_router_pd_decode_retries_total',
      help: 'Decode legs tried again on another decode instance, with the same KV parameters (same, while the prefill instance still holds the blocks) or after prefilling again (new).',
      labelNames: ['endpoint', 'params'],
      registers,
    })
    this.legSeconds = new Histogram({
      name: 'prefix_router_pd_leg_seconds',
      help: "Disaggregated requests' legs: prefill (from sending the prefill leg to its answer, retries included) and decode (from sending the decode leg to its first byte).",
      labelNames: ['endpoint', 'leg'],
      buckets: [0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60],
      registers,
    })
  }
}
