// `shared-prefix`: SGLang's "generated-shared-prefix" benchmark
// (sglang/python/sglang/bench_serving.py, sample_generated_shared_prefix_requests, with its
// defaults gsp-num-groups 64, gsp-prompts-per-group 16, gsp-system-prompt-len 2048,
// gsp-question-len 128, gsp-output-len 256): `groups` long system prompts, each with
// `prompts-per-group` questions; a prompt is its group's system prompt followed by one
// question. SGLang sends the 1,024 prompts once in random order; a replay of a given
// duration sends them in passes, each pass reshuffled with new questions, so only the
// system prompts repeat (a repeated question would be a full hit no real user causes).
//
//   arrivals  Poisson, `rate` requests/s
//   prompt    [user: group system prompt (`system-tokens`) + question (`question-tokens`)]
//   output    `output-tokens` (max_tokens)
import { Rng } from '../rng.js'
import { prose } from '../text.js'
import type { TimedRequest, Workload, WorkloadParams } from '../types.js'

export const sharedPrefix: Workload = {
  name: 'shared-prefix',
  summary: "SGLang's generated-shared-prefix: 64 groups x 16 prompts, 2,048-token system prompt, 128-token question, 256 output tokens",
  params: [
    { flag: 'rate', description: 'requests per second (Poisson)', default: 10, min: 0.001, max: 100_000, integer: false },
    { flag: 'groups', description: 'system prompts (groups)', default: 64, min: 1, max: 1_000_000, integer: true },
    { flag: 'prompts-per-group', description: 'questions per group in one pass', default: 16, min: 1, max: 1_000_000, integer: true },
    { flag: 'system-tokens', description: 'tokens per system prompt', default: 2048, min: 1, max: 1_000_000, integer: true },
    { flag: 'question-tokens', description: 'tokens per question', default: 128, min: 1, max: 1_000_000, integer: true },
    { flag: 'output-tokens', description: 'max_tokens of each request', default: 256, min: 1, max: 100_000, integer: true },
  ],
  *generate(p: WorkloadParams, { seed, durationMs }): Iterable<TimedRequest> {
    const arrivals = new Rng(seed, 'shared-prefix/arrivals')
    const order = new Rng(seed, 'shared-prefix/order')
    const questions = new Rng(seed, 'shared-prefix/questions')
    const systems: string[] = []
    for (let g = 0; g < p.groups!; g++) {
      systems.push(prose(new Rng(seed, `shared-prefix/system/${g}`), p['system-tokens']!, `System prompt ${g}. `))
    }
    const perPass = p.groups! * p['prompts-per-group']!
    const meanGapMs = 1000 / p.rate!
    let pass: number[] = []
    let at = arrivals.exponential(meanGapMs)
    for (let i = 0; at < durationMs; i++, at += arrivals.exponential(meanGapMs)) {
      if (pass.length === 0) {
        // One pass: every group prompts-per-group times, in random order.
        pass = order.shuffle(Array.from({ length: perPass }, (_, k) => k % p.groups!))
      }
      const g = pass.pop()!
      const question = prose(questions, p['question-tokens']!, `Question ${i}: `)
      yield {
        at,
        api: 'chat',
        body: { messages: [{ role: 'user', content: systems[g]! + question }], max_tokens: p['output-tokens']! },
      }
    }
  },
}
