// `long-context`: SageMaker's benchmark shape. Many distinct documents of ~8,000 tokens
// (contracts, reports, code files) are asked short questions; each request is one
// document plus a unique question, so only the document part can be reused.
//
//   arrivals   Poisson, `rate` requests/s
//   document   Zipf(`zipf`) over `documents` documents: P(rank k) ∝ 1/(k+1)^zipf
//   prompt     [system: one short instruction shared by all] [user: document + question]
//   question   uniform in [½, 1½] × `question-tokens`, unique per request
//   output     `output-tokens` (max_tokens)
//
// Why these defaults (docs/replay.md, "long-context", has the derivation). With the llama-3.1-70b-p5
// profile an instance caches 80,000 blocks of 16 tokens, about 155 documents once the
// running requests' blocks are set aside; 7 instances hold about 1,090. Under `random`
// every instance sees every document, so its cache holds only the ~155 most recent of
// 1,000 and the Zipf(0.5) head is not concentrated enough to save it: about a quarter of
// the prompt tokens hit (SageMaker's RANDOM baseline was ~25%). A router that gives each
// document one home needs ~143 documents per instance, which fits, so the ideal hit rate
// is the share of prompt tokens that are not first sightings or questions: about 97%.
// 14 requests/s keep the fleet busy but below saturation: under `random` ~6,100 uncached
// tokens per request make ~85k prefill tokens/s, ~37% of 7 × ~33k tokens/s.
import { Rng, Zipf } from '../rng.js'
import { prose } from '../text.js'
import type { TimedRequest, Workload, WorkloadParams } from '../types.js'

const SYSTEM = 'You answer questions about the document the user provides. Quote the relevant passage.'

export const longContext: Workload = {
  name: 'long-context',
  summary: 'distinct ~8,000-token documents with Zipf popularity, a short unique question each, Poisson arrivals',
  params: [
    { flag: 'rate', description: 'requests per second (Poisson)', default: 14, min: 0.001, max: 100_000, integer: false },
    { flag: 'documents', description: 'distinct documents', default: 1000, min: 1, max: 1_000_000, integer: true },
    { flag: 'zipf', description: 'Zipf exponent of document popularity (0 = uniform)', default: 0.5, min: 0, max: 4, integer: false },
    { flag: 'doc-tokens', description: 'tokens per document', default: 8000, min: 16, max: 1_000_000, integer: true },
    { flag: 'question-tokens', description: 'mean question tokens (uniform ½× to 1½×)', default: 64, min: 2, max: 100_000, integer: true },
    { flag: 'output-tokens', description: 'max_tokens of each request', default: 64, min: 1, max: 100_000, integer: true },
  ],
  *generate(p: WorkloadParams, { seed, durationMs }): Iterable<TimedRequest> {
    const arrivals = new Rng(seed, 'long-context/arrivals')
    const picks = new Rng(seed, 'long-context/documents')
    const questions = new Rng(seed, 'long-context/questions')
    const zipf = new Zipf(p.documents!, p.zipf!)
    // Documents are made on first use (each from its own stream, so its text does not
    // depend on when it is first asked about) and kept: one string per document.
    const docs = new Map<number, string>()
    const meanGapMs = 1000 / p.rate!
    const q = p['question-tokens']!
    let at = arrivals.exponential(meanGapMs)
    for (let i = 0; at < durationMs; i++, at += arrivals.exponential(meanGapMs)) {
      const d = zipf.sample(picks)
      let doc = docs.get(d)
      if (doc === undefined) {
        doc = prose(new Rng(seed, `long-context/document/${d}`), p['doc-tokens']!, `Document ${d}. `)
        docs.set(d, doc)
      }
      const question = prose(questions, Math.max(1, Math.round(q * questions.uniform(0.5, 1.5))), `Question ${i}: `)
      yield {
        at,
        api: 'chat',
        body: {
          messages: [
            { role: 'system', content: SYSTEM },
            { role: 'user', content: `${doc}\n\n${question}` },
          ],
          max_tokens: p['output-tokens']!,
        },
      }
    }
  },
}
