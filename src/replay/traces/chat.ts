// `chat`: a chat service in the shape of Mooncake's conversation trace (its FAST '25
// release: 12,031 requests in an hour, mean input ~12,000 tokens, mean output ~343).
//
//   system prompt   every request begins with the same block, id 0 (one block: 512 tokens)
//   conversations   start as a Poisson stream of rate / turns a second, so that requests
//                   arrive at `rate` a second (3.34: ~12,000 an hour)
//   turns           geometric, mean `turns` (2); each turn resends the whole history:
//                   turn k+1's input = turn k's input + its reply + the new message, and its
//                   ids = turn k's full blocks + new ids (the block turn k left partial gets a
//                   new id: its content now goes on with the reply)
//   first message   log-normal, mean `first-tokens` (11,000), σ 1.2: a pasted document, a
//                   long instruction, or a line; median ~5,400, 5% under ~750, 1% over ~85,000
//   later messages  log-normal, mean `message-tokens` (1,000), σ 1.0
//   reply           log-normal, mean `output-tokens` (343), σ 0.8, in [1, 8×mean]; it is
//                   part of the next turn's input
//   next turn       (reply tokens × 25 ms, the reply streaming at ~40 tokens/s) + think time,
//                   log-normal, mean `think-time` (60 s), σ 0.8: mostly 15 s to 3 min
//   context         a first message is cut so that the turn fits `context` (131,072, the p5
//                   profile's); a later turn that would not fit is not sent: the conversation
//                   ends there, as when a user hits the limit and starts over
//
// Why these: half the requests are first turns (2 turns a conversation on average), so the
// first message sets most of the mean input: 512 + 11,000, plus one (reply + message) of
// ~1,350 per request on average for the later turns, less what the context cuts. Measured
// over an hour (seed 1): 11,703 requests, mean input ~12,200 tokens, mean output ~342, 8%
// of requests under 2,000 tokens and 3% over 50,000 (test/replay/traces.test.ts checks
// these within tolerances). About 48% of the input tokens are in blocks seen before (the
// system block and resent histories), what an unbounded cache would hit; Mooncake reports
// hit ratios of up to about 50% for its traces. Fewer turns with longer first messages
// would lower that share, more turns raise it. Think times of a minute keep ~100
// conversations in flight at once, so an instance's cache sees many histories interleaved.
// The service starts empty at time 0; its first minute or two has fewer later turns.
import { Rng } from '../rng.js'
import type { WorkloadParams } from '../types.js'
import { Arrivals, type Source } from './arrivals.js'
import { extend, IdCounter, lognormalTokens } from './blocks.js'
import type { ShapeOptions, TraceRow, TraceShape } from './types.js'

const FIRST_SIGMA = 1.2
const MESSAGE_SIGMA = 1.0
const OUTPUT_SIGMA = 0.8
const THINK_SIGMA = 0.8
const STREAM_MS_PER_TOKEN = 25

export const chat: TraceShape = {
  name: 'chat',
  summary: "a chat service like Mooncake's conversation trace: one shared system block, multi-turn, histories resent",
  params: [
    { flag: 'rate', description: 'requests per second (conversations start at rate / turns)', default: 3.34, min: 0.001, max: 10_000, integer: false },
    { flag: 'turns', description: 'mean turns per conversation (geometric)', default: 2, min: 1, max: 1000, integer: false },
    { flag: 'first-tokens', description: 'mean tokens of a first message (log-normal, σ 1.2)', default: 11_000, min: 1, max: 1_000_000, integer: true },
    { flag: 'message-tokens', description: 'mean tokens of a later message (log-normal, σ 1.0)', default: 1000, min: 1, max: 1_000_000, integer: true },
    { flag: 'output-tokens', description: 'mean reply tokens (log-normal, σ 0.8)', default: 343, min: 1, max: 100_000, integer: true },
    { flag: 'think-time', description: 'mean seconds between a reply and the next turn (log-normal, σ 0.8)', default: 60, min: 0, max: 86_400, integer: false },
    { flag: 'context', description: 'largest input + output tokens a turn may have', default: 131_072, min: 2, max: 16_777_216, integer: true },
  ],
  *generate(p: WorkloadParams, o: ShapeOptions): Generator<TraceRow, void, undefined> {
    const B = o.blockTokens
    const context = p.context!
    // Ids are taken as requests are sent, so they increase through the trace as in a release.
    const ids = new IdCounter(1) // 0 is the system block
    const output = (rng: Rng): number => lognormalTokens(rng, p['output-tokens']!, OUTPUT_SIGMA, 1, 8 * p['output-tokens']!)
    const thinkMedianMs = (p['think-time']! * 1000) / Math.exp((THINK_SIGMA * THINK_SIGMA) / 2)

    // A conversation after its first turn: its next turn, until its turns are spent or the
    // next one would not fit the context.
    const conversation = (rng: Rng, first: TraceRow, turns: number): Source => {
      let last = first
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
        const message = lognormalTokens(rng, p['message-tokens']!, MESSAGE_SIGMA, 1, context)
        reply = output(rng)
        input = last.inputLength + last.outputLength + message
        const think = rng.lognormal(thinkMedianMs, THINK_SIGMA)
        if (input + reply > context) return
        c.at = last.at + last.outputLength * STREAM_MS_PER_TOKEN + think
      }
      schedule()
      return c
    }

    const starts = new Rng(o.seed, 'chat/starts')
    const meanGapMs = (1000 * p.turns!) / p.rate!
    let started = 0
    const opener: Source = {
      at: starts.exponential(meanGapMs),
      fire(queue): TraceRow {
        const at = opener.at
        opener.at += starts.exponential(meanGapMs)
        const rng = new Rng(o.seed, `chat/conversation/${started++}`)
        const turns = rng.geometric(p.turns!)
        const reply = output(rng)
        const input = B + lognormalTokens(rng, p['first-tokens']!, FIRST_SIGMA, 1, Math.max(1, context - B - reply))
        const row: TraceRow = { at, inputLength: input, outputLength: reply, hashIds: extend([0], B, input, B, ids) }
        queue.add(conversation(rng, row, turns))
        return row
      },
    }
    const queue = new Arrivals()
    queue.add(opener)
    yield* queue.run()
  },
}
