// `tenants`: one product, one system prompt, many customers. Every request starts with
// the same system prompt; each tenant sends its own id in the
// X-Amzn-SageMaker-Prefix-Aware-Id header, as SageMaker's multi-tenant endpoints do, so a
// prefix router keys (tenant, prefix) and does not pile every tenant onto the one
// instance that owns the shared prompt. Tenant sizes are skewed, as customers are.
//
//   arrivals  Poisson, `rate` requests/s
//   tenant    Zipf(`zipf`) over `tenants`, ids "tenant-0" … (header, not the body)
//   prompt    [system: the shared prompt (`system-tokens`)] [user: log-normal, median
//             `user-tokens`, σ 0.8, in [4, 16×], unique]
//   output    `output-tokens` (max_tokens)
import { Rng, Zipf } from '../rng.js'
import { prose } from '../text.js'
import type { TimedRequest, Workload, WorkloadParams } from '../types.js'

export const tenants: Workload = {
  name: 'tenants',
  summary: 'one system prompt shared by several tenants, each with its own X-Amzn-SageMaker-Prefix-Aware-Id',
  params: [
    { flag: 'rate', description: 'requests per second (Poisson)', default: 10, min: 0.001, max: 100_000, integer: false },
    { flag: 'tenants', description: 'tenants', default: 12, min: 1, max: 100_000, integer: true },
    { flag: 'zipf', description: 'Zipf exponent of tenant sizes', default: 1, min: 0, max: 4, integer: false },
    { flag: 'system-tokens', description: 'tokens of the shared system prompt', default: 2000, min: 1, max: 1_000_000, integer: true },
    { flag: 'user-tokens', description: 'median user message tokens (log-normal)', default: 200, min: 1, max: 100_000, integer: true },
    { flag: 'output-tokens', description: 'max_tokens of each request', default: 128, min: 1, max: 100_000, integer: true },
  ],
  *generate(p: WorkloadParams, { seed, durationMs }): Iterable<TimedRequest> {
    const arrivals = new Rng(seed, 'tenants/arrivals')
    const who = new Rng(seed, 'tenants/tenant')
    const users = new Rng(seed, 'tenants/users')
    const zipf = new Zipf(p.tenants!, p.zipf!)
    const system = prose(new Rng(seed, 'tenants/system'), p['system-tokens']!, 'Assistant instructions. ')
    const median = p['user-tokens']!
    const meanGapMs = 1000 / p.rate!
    let at = arrivals.exponential(meanGapMs)
    for (let i = 0; at < durationMs; i++, at += arrivals.exponential(meanGapMs)) {
      const t = zipf.sample(who)
      const tokens = Math.min(16 * median, Math.max(4, Math.round(users.lognormal(median, 0.8))))
      yield {
        at,
        api: 'chat',
        tenant: `tenant-${t}`,
        body: {
          messages: [
            { role: 'system', content: system },
            { role: 'user', content: prose(users, tokens, `Request ${i}: `) },
          ],
          max_tokens: p['output-tokens']!,
        },
      }
    }
  },
}
