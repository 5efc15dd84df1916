// `mixed`: requests drawn from public datasets with Poisson arrivals, in the manner of
// Mooncake's synthetic trace (built from ShareGPT, LEval and LooGLE). Three kinds:
//
//   chats       `chat-share` of requests (0.4): ShareGPT-like conversations, turns geometric
//               with mean `turns` (3.5), each resending its history. First message log-normal
//               mean 300 tokens (σ 1.0), later ones mean 150 (σ 1.0), replies mean 250 (σ 0.8),
//               next turn (reply × 25 ms) + log-normal think time, mean `think-time` (20 s):
//               a few hundred tokens at first, a few thousand after some turns
//   documents   `doc-share` (0.4): long-document QA (LEval, LooGLE). `documents` (200) documents
//               of 8,000 to 30,000 tokens (uniform, a whole number of blocks), chosen with Zipf
//               popularity (`zipf`, 0.8); a request is a document followed by a new question
//               block (log-normal mean 40 tokens, σ 0.6), so questions on one document share
//               all of its blocks; answers log-normal mean 80 (σ 0.8)
//   one-offs    the rest (0.2): a prompt seen once, log-normal mean 1,500 tokens (σ 1.0, in
//               [16, 32,768]), output mean 400 (σ 0.8)
//
// Arrivals: documents and one-offs are Poisson streams at their share of `rate`, chats start
// at chat-share × rate / turns a second. Measured over an hour (seed 1): 18,447 requests,
// mean input ~8,800 tokens, mean output ~210.
//
// Why `rate` 5: it keeps 4 instances of llama-3.1-70b-p5 busy but not saturated. The
// documents are most of the load (~19,000 tokens each; 200 of them are ~3.8 M tokens, while
// an instance caches 1.28 M); under `random` every instance sees every document and about
// half the prompt tokens miss: ~5 × 8,800 × 0.48 ≈ 21,000 tokens/s to prefill, ~16% of the
// fleet's ~134,000, with decode on top and ~8 requests in flight per instance, just under
// the default concurrency threshold of 10 (`prefix_aware` overflows ~14% of requests).
// Replayed, `random`'s TTFT is flat over the run: P50 107 ms over the first 10 minutes and
// 108 ms over the hour (P90 ~790 ms), while a router that keeps each document on one
// instance turns most document prefills into hits. At 8 a second `prefix_aware` overflows
// half its requests; at 12, `random`'s P50 is 163 ms.
import { Rng, Zipf } from '../rng.js'
import type { WorkloadParams } from '../types.js'
import { Arrivals, type Source } from './arrivals.js'
import { extend, IdCounter, lognormalTokens } from './blocks.js'
import type { ShapeOptions, TraceRow, TraceShape } from './types.js'
import { OutOfRangeError } from '../../core/errors.js'

const STREAM_MS_PER_TOKEN = 25
const DOC_MIN_TOKENS = 8000
const DOC_MAX_TOKENS = 30_000

export const mixed: TraceShape = {
  name: 'mixed',
  summary: "mixed public-dataset requests like Mooncake's synthetic trace: short chats, long-document QA, one-off prompts",
  params: [
    { flag: 'rate', description: 'requests per second, all kinds (Poisson)', default: 5, min: 0.001, max: 10_000, integer: false },
    { flag: 'chat-share', description: 'share of requests that are chat turns', default: 0.4, min: 0, max: 1, integer: false },
    { flag: 'doc-share', description: 'share of requests that are questions on a document (the rest are one-offs)', default: 0.4, min: 0, max: 1, integer: false },
    { flag: 'documents', description: 'distinct documents (8,000 to 30,000 tokens each)', default: 200, min: 1, max: 1_000_000, integer: true },
    { flag: 'zipf', description: 'Zipf exponent of document popularity', default: 0.8, min: 0, max: 4, integer: false },
    { flag: 'turns', description: 'mean turns per chat (geometric)', default: 3.5, min: 1, max: 1000, integer: false },
    { flag: 'think-time', description: 'mean seconds between a reply and the next chat turn (log-normal, σ 0.8)', default: 20, min: 0, max: 86_400, integer: false },
  ],
  *generate(p: WorkloadParams, o: ShapeOptions): Generator<TraceRow, void, undefined> {
    const B = o.blockTokens
    const chatShare = p['chat-share']!
    const docShare = p['doc-share']!
    const oneOffShare = 1 - chatShare - docShare
    if (oneOffShare < -1e-9) throw new OutOfRangeError('chat-share', 'at most 1 - doc-share', chatShare, `--chat-share and --doc-share must add up to at most 1; got ${chatShare} + ${docShare}`)
    const ids = new IdCounter(0)
    const queue = new Arrivals()

    // A Poisson stream at `rate` × `share` a second, each arrival made by `make`.
    const poisson = (stream: string, share: number, make: (at: number, queue: Arrivals) => TraceRow): void => {
      if (share <= 0) return
      const gaps = new Rng(o.seed, `mixed/${stream}`)
      const meanGapMs = 1000 / (p.rate! * share)
      const s: Source = {
        at: gaps.exponential(meanGapMs),
        fire(q): TraceRow {
          const at = s.at
          s.at += gaps.exponential(meanGapMs)
          return make(at, q)
        },
      }
      queue.add(s)
    }

    const thinkMedianMs = (p['think-time']! * 1000) / Math.exp(0.8 ** 2 / 2)
    let chats = 0
    poisson('chat-starts', chatShare / p.turns!, (at, q) => {
      const rng = new Rng(o.seed, `mixed/chat/${chats++}`)
      let turns = rng.geometric(p.turns!)
      let last: TraceRow = {
        at,
        inputLength: lognormalTokens(rng, 300, 1.0, 4, 32_768),
        outputLength: lognormalTokens(rng, 250, 0.8, 1, 2000),
        hashIds: [],
      }
      last.hashIds = ids.take(Math.ceil(last.inputLength / B))
      const first = last
      let input = 0
      let reply = 0
      const c: Source = {
        at: Infinity,
        fire(): TraceRow {
          last = { at: c.at, inputLength: input, outputLength: reply, hashIds: extend(last.hashIds, last.inputLength, input, B, ids) }
          schedule()
          return last
        },
      }
      const schedule = (): void => {
        c.at = Infinity
        if (--turns <= 0) return
        input = last.inputLength + last.outputLength + lognormalTokens(rng, 150, 1.0, 4, 32_768)
        reply = lognormalTokens(rng, 250, 0.8, 1, 2000)
        c.at = last.at + last.outputLength * STREAM_MS_PER_TOKEN + rng.lognormal(thinkMedianMs, 0.8)
      }
      schedule()
      q.add(c)
      return first
    })

    const popularity = new Zipf(p.documents!, p.zipf!)
    const pick = new Rng(o.seed, 'mixed/doc-picks')
    const documents = new Map<number, { tokens: number; ids: number[] }>()
    let questions = 0
    poisson('doc-questions', docShare, (at) => {
      const d = popularity.sample(pick)
      let doc = documents.get(d)
      if (doc === undefined) {
        const size = new Rng(o.seed, `mixed/document/${d}`)
        const blocks = Math.ceil(Math.round(size.uniform(DOC_MIN_TOKENS, DOC_MAX_TOKENS)) / B)
        doc = { tokens: blocks * B, ids: ids.take(blocks) }
        documents.set(d, doc)
      }
      const rng = new Rng(o.seed, `mixed/question/${questions++}`)
      const question = lognormalTokens(rng, 40, 0.6, 4, 1024)
      const input = doc.tokens + question
      return { at, inputLength: input, outputLength: lognormalTokens(rng, 80, 0.8, 1, 1024), hashIds: [...doc.ids, ...ids.take(Math.ceil(question / B))] }
    })

    let oneOffs = 0
    poisson('one-offs', Math.max(0, oneOffShare), (at) => {
      const rng = new Rng(o.seed, `mixed/one-off/${oneOffs++}`)
      const input = lognormalTokens(rng, 1500, 1.0, 16, 32_768)
      return { at, inputLength: input, outputLength: lognormalTokens(rng, 400, 0.8, 1, 4096), hashIds: ids.take(Math.ceil(input / B)) }
    })

    yield* queue.run()
  },
}
