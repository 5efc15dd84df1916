// One model, two clocks: the same requests give the same TTFTs on a live worker (real
// clock, real sockets) and in the virtual engine (simulated time, no sockets).
import { describe, expect, it } from 'vitest'
import { fillerText, VirtualFleet, type VirtualRequest } from '../../src/sim/index.js'
import { fleet, metric, parsePrometheus, post, promptOf, scrape, stream } from './helpers.js'

type Case = { path: string; body: Record<string, unknown>; virtual: VirtualRequest }

/** Uncached, fully cached, extending turn 1, another uncached: each round with prompts of its own. */
function round(k: number): Case[] {
  const requests: Case[] = []
  const chat = (messages: { role: string; content: string }[]) =>
    requests.push({ path: '/v1/chat/completions', body: { messages, max_tokens: 3 }, virtual: { messages, maxTokens: 3 } })
  const system = { role: 'system', content: promptOf(3000, `Shared system prompt ${k}`) }
  const turn1 = [system, { role: 'user', content: 'First question?' }]
  chat(turn1)
  chat(turn1)
  chat([...turn1, { role: 'assistant', content: fillerText(0, 3) }, { role: 'user', content: 'Second question?' }])
  const text = promptOf(3000, `a long document ${k}`)
  requests.push({ path: '/v1/completions', body: { prompt: text, max_tokens: 3 }, virtual: { text, maxTokens: 3 } })
  return requests
}

const warmUp = { messages: [{ role: 'user', content: 'warm-up' }], max_tokens: 1 }

/** The TTFTs the virtual engine gives the rounds, after the same warm-up. */
function replay(vf: VirtualFleet, rounds: Case[][]): number[][] {
  vf.submit(0, { messages: warmUp.messages, maxTokens: 1 })
  vf.run()
  return rounds.map((requests) =>
    requests.map((r) => {
      let ttft = NaN
      vf.submit(0, r.virtual, { at: vf.now + 100, onFinish: (res) => (ttft = res.ttftMs) })
      vf.run()
      return ttft
    }),
  )
}

const median = (xs: number[]): number => {
  const s = [...xs].sort((a, b) => a - b)
  return (s[(s.length - 1) >> 1]! + s[s.length >> 1]!) / 2
}

describe('live worker vs virtual engine', () => {
  it('give the same TTFTs, within timer noise, for the same sequence of requests', async () => {
    // the default profile at time scale 1: TTFTs of 50-300 ms, steps of ~22 ms
    const u = (await fleet({ profile: 'llama-3.1-70b-p5' })).urls[0]!
    // The same requests on the tiny profile (TTFTs of 3-33 ms) measure what this machine adds to
    // a model's TTFT right now (HTTP, JSON, hashing, a late timer), which grows with its load.
    const quick = (await fleet({ profile: 'tiny' })).urls[0]!
    const reply = (await post(u, '/v1/chat/completions', warmUp)).body
    await post(quick, '/v1/chat/completions', warmUp)

    const rounds = [0, 1, 2].map(round)
    const live: number[][] = []
    const liveQuick: number[][] = []
    for (const requests of rounds) {
      const l: number[] = []
      const q: number[] = []
      for (const [i, r] of requests.entries()) {
        const b = await stream(quick, r.path, r.body)
        expect(b.done).toBe(true)
        q.push(b.ttftMs)
        const s = await stream(u, r.path, r.body)
        expect(s.done).toBe(true)
        if (i === 0) expect(s.content).toBe(fillerText(0, 3)) // what the third request says turn 1 was answered
        l.push(s.ttftMs)
      }
      live.push(l)
      liveQuick.push(q)
    }

    const vf = new VirtualFleet({ instances: 1 })
    const virtual = replay(vf, rounds)
    const virtualQuick = replay(new VirtualFleet({ instances: 1, profile: 'tiny' }), rounds)
    expect(reply.usage.completion_tokens).toBe(1)
    const [v] = virtual
    // the model's own numbers differ a lot between these requests...
    expect(v![1]!).toBeLessThan(v![0]! / 2)
    // ...the rounds are the same to the model...
    expect(v!.every(Number.isFinite) && virtualQuick.flat().every(Number.isFinite)).toBe(true)
    for (const other of virtual) for (const [i, t] of other.entries()) expect(t).toBeCloseTo(v![i]!, 6)
    // ...and each live TTFT is the virtual one plus HTTP and timer latency: never less...
    for (const [k, l] of live.entries()) for (const [i, t] of l.entries()) expect(t).toBeGreaterThan(virtual[k]![i]! - 3)
    for (const [k, q] of liveQuick.entries()) for (const [i, t] of q.entries()) expect(t).toBeGreaterThan(virtualQuick[k]![i]! - 3)
    // ...and, since the machine only ever adds, the quickest of the three rounds adds no more
    // than three times what it typically added on the tiny worker (a worker whose clock ran 1.5
    // times slow would add 66 ms to the 132 ms TTFTs in every round)
    const added = median(liveQuick.flatMap((q, k) => q.map((t, i) => t - virtualQuick[k]![i]!)))
    for (const [i, t] of v!.entries()) {
      const quickest = Math.min(...live.map((l) => l[i]!))
      expect(quickest - t, `request ${i}: ${live.map((l) => l[i]!.toFixed(1))} ms against ${t.toFixed(1)} ms in the model`).toBeLessThan(3 * added + 3)
    }
    // inside the worker the TTFTs are the model's, to the microsecond
    const m = await scrape(u)
    const liveSum = metric(m, 'vllm:time_to_first_token_seconds_sum') * 1000
    const virtualSum = metric(parsePrometheus(vf.metrics(0)), 'vllm:time_to_first_token_seconds_sum') * 1000
    expect(Math.abs(liveSum - virtualSum)).toBeLessThan(0.01)
  })

  it('--time-scale runs the same model faster in wall time', async () => {
    const slow = await fleet({ profile: 'llama-3.1-70b-p5', timeScale: 1 })
    const fast = await fleet({ profile: 'llama-3.1-70b-p5', timeScale: 20 })
    const slowMs: number[] = []
    const fastMs: number[] = []
    for (let i = 0; i < 3; i++) {
      const body = { prompt: promptOf(1000, `scaled ${i}`), max_tokens: 10 }
      const a = await post(slow.urls[0]!, '/v1/completions', body)
      const b = await post(fast.urls[0]!, '/v1/completions', body)
      expect(b.body.usage).toEqual(a.body.usage)
      slowMs.push(a.ms)
      fastMs.push(b.ms)
    }
    // A busy machine only ever adds to a wall time: the quickest of three is the closest to the
    // model's, where one sample of the fast worker could take a hiccup larger than a third of
    // the slow one's time.
    expect(Math.min(...fastMs)).toBeLessThan(Math.min(...slowMs) / 3)
  })
})
