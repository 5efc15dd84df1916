// The exact view's tokenizer in the metrics: its fallbacks by reason, read from its counters at
// scrape time (nothing is counted on the request path for them). One tokenizer serves every
// endpoint, so there is no endpoint label.
import { Counter, type Registry } from 'prom-client'
import type { RequestTokenizer } from './types.js'

export function registerTokenizerMetrics(tokenizer: RequestTokenizer, registers: Registry[]): void {
  new Counter({
    name: 'prefix_router_tokenizer_fallbacks_total',
    help: "Requests routed on the approximate view because the exact view's tokenizer gave no ids, by reason: timeout, too_large (more ids or bytes than the request can have), malformed, refused (an answer other than 200), unreachable, input (not tokenizable as given), unavailable (no instance to ask). The last one's words are in /admin/instances (tokenizer.lastFailure).",
    labelNames: ['mode', 'reason'],
    registers,
    collect() {
      this.reset()
      for (const [reason, n] of Object.entries(tokenizer.stats().fallbacks)) this.inc({ mode: tokenizer.mode, reason }, n)
    },
  })
}
