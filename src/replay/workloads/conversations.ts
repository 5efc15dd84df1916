// `conversations`: ShareGPT-like multi-turn chats behind a few applications. Each
// application has its own system prompt; a conversation resends its whole history every
// turn, so turn k+1's prompt begins with turn k's (the part a cache can reuse).
//
//   conversations  Poisson, `rate` new conversations/s
//   application    Zipf(`zipf`) over `apps`; its system prompt is uniform in
//                  [½, 1½] × `system-tokens` tokens, the same for all its conversations
//   turns          geometric with mean `turns` (ShareGPT averages about 3.5)
//   user message   log-normal, median `user-tokens`, σ 0.9 (ShareGPT's long tail), in [4, 16×]
//   reply          max_tokens log-normal, median `output-tokens`, σ 0.7, in [8, 8×]; the next
//                  turn carries a reply of that length as the assistant message
//   next turn      arrives (reply tokens × 25 ms) + exponential(`think-time` s) after the
//                  previous one: the time to stream the reply at ~40 tokens/s, then to think
//
// The schedule is open-loop: a turn's arrival does not wait for the simulated reply, so
// every strategy sees the same requests at the same times and differences come from
// routing alone (a slow strategy does not get a lighter load by delaying its users).
import { popByTime, pushByTime } from '../by-time.js'
import { Rng, Zipf } from '../rng.js'
import { prose } from '../text.js'
import type { TimedRequest, Workload, WorkloadParams } from '../types.js'

interface Message {
  role: string
  content: string
}

interface Conversation {
  id: number
  rng: Rng
  history: Message[]
  turnsLeft: number
  at: number
}

export const conversations: Workload = {
  name: 'conversations',
  summary: 'ShareGPT-like multi-turn chats: a system prompt per application, ~3.5 turns, history resent each turn',
  params: [
    { flag: 'rate', description: 'new conversations per second (Poisson)', default: 2, min: 0.001, max: 100_000, integer: false },
    { flag: 'apps', description: 'applications (distinct system prompts)', default: 16, min: 1, max: 100_000, integer: true },
    { flag: 'zipf', description: 'Zipf exponent of application popularity', default: 1, min: 0, max: 4, integer: false },
    { flag: 'system-tokens', description: 'mean system prompt tokens (uniform ½× to 1½×)', default: 200, min: 1, max: 100_000, integer: true },
    { flag: 'turns', description: 'mean turns per conversation (geometric)', default: 3.5, min: 1, max: 1000, integer: false },
    { flag: 'user-tokens', description: 'median user message tokens (log-normal)', default: 80, min: 1, max: 100_000, integer: true },
    { flag: 'output-tokens', description: 'median reply tokens, max_tokens (log-normal)', default: 200, min: 1, max: 100_000, integer: true },
    { flag: 'think-time', description: 'mean think time between turns, seconds (exponential)', default: 20, min: 0, max: 100_000, integer: false },
  ],
  *generate(p: WorkloadParams, { seed, durationMs }): Iterable<TimedRequest> {
    const starts = new Rng(seed, 'conversations/starts')
    const apps = new Zipf(p.apps!, p.zipf!)
    const systems = new Map<number, string>()
    const system = (a: number): string => {
      let s = systems.get(a)
      if (s === undefined) {
        const rng = new Rng(seed, `conversations/app/${a}`)
        s = prose(rng, Math.max(1, Math.round(p['system-tokens']! * rng.uniform(0.5, 1.5))), `Application ${a} instructions. `)
        systems.set(a, s)
      }
      return s
    }
    const userTokens = (rng: Rng): number => clamp(Math.round(rng.lognormal(p['user-tokens']!, 0.9)), 4, 16 * p['user-tokens']!)
    const replyTokens = (rng: Rng): number => clamp(Math.round(rng.lognormal(p['output-tokens']!, 0.7)), 8, 8 * p['output-tokens']!)

    // Turns of concurrent conversations interleave: a heap by next-turn time, fed by the
    // Poisson stream of conversation starts.
    const heap: Conversation[] = []
    const meanGapMs = 1000 / p.rate!
    let nextStart = starts.exponential(meanGapMs)
    let started = 0
    for (;;) {
      const nextTurn = heap[0]?.at ?? Infinity
      if (nextStart < durationMs && nextStart <= nextTurn) {
        const id = started++
        const rng = new Rng(seed, `conversations/conversation/${id}`)
        const app = apps.sample(starts)
        pushByTime(heap, { id, rng, history: [{ role: 'system', content: system(app) }], turnsLeft: rng.geometric(p.turns!), at: nextStart })
        nextStart += starts.exponential(meanGapMs)
        continue
      }
      // The heap is ordered: once its earliest turn is past the end, so are the others.
      if (nextTurn >= durationMs) return
      const c = popByTime(heap)!
      const user: Message = { role: 'user', content: prose(c.rng, userTokens(c.rng), `User ${c.id}, turn ${c.history.length >> 1}: `) }
      const reply = replyTokens(c.rng)
      const messages = [...c.history, user]
      yield { at: c.at, api: 'chat', body: { messages, max_tokens: reply } }
      if (--c.turnsLeft > 0) {
        c.history = [...messages, { role: 'assistant', content: prose(c.rng, reply) }]
        c.at += reply * 25 + c.rng.exponential(p['think-time']! * 1000)
        pushByTime(heap, c)
      }
    }
  },
}

function clamp(v: number, lo: number, hi: number): number {
  return v < lo ? lo : v > hi ? hi : v
}

