// One model, two clocks: the same requests give the same TTFTs on a live worker (real
// clock, real sockets) and in the virtual engine (simulated time, no sockets).
import { describe, expect, it } from 'vitest'
import { fillerText, VirtualFleet, type VirtualRequest } from '../../src/sim/index.js'
import { fleet, metric, parsePrometheus, post, promptOf, scrape, stream } from './helpers.js'

const system = { role: 'system', content: promptOf(3000, 'Shared system prompt') }
const turn1 = [system, { role: 'user', content: 'First question?' }]

describe('live worker vs virtual engine', () => {
  it('give the same TTFTs, within timer noise, for the same sequence of requests', async () => {
    // the default profile at time scale 1: TTFTs of 50-300 ms, steps of ~22 ms
    const { urls } = await fleet({ profile: 'llama-3.1-70b-p5' })
    const u = urls[0]!
    const reply = (await post(u, '/v1/chat/completions', { messages: [{ role: 'user', content: 'warm-up' }], max_tokens: 1 })).body

    const requests: { path: string; body: Record<string, unknown>; virtual: VirtualRequest }[] = []
    const chat = (messages: { role: string; content: string }[]) =>
      requests.push({ path: '/v1/chat/completions', body: { messages, max_tokens: 3 }, virtual: { messages, maxTokens: 3 } })
    chat(turn1) // uncached
    chat(turn1) // fully cached
    const answer = fillerText(0, 3) // what turn 1 was answered
    chat([...turn1, { role: 'assistant', content: answer }, { role: 'user', content: 'Second question?' }]) // extends turn 1
    const text = promptOf(3000, 'a long document')
    requests.push({ path: '/v1/completions', body: { prompt: text, max_tokens: 3 }, virtual: { text, maxTokens: 3 } })

    const live: number[] = []
    for (const [i, r] of requests.entries()) {
      const s = await stream(u, r.path, r.body)
      expect(s.done).toBe(true)
      if (i === 0) expect(s.content).toBe(answer)
      live.push(s.ttftMs)
    }

    const vf = new VirtualFleet({ instances: 1 })
    vf.submit(0, { messages: [{ role: 'user', content: 'warm-up' }], maxTokens: 1 })
    vf.run()
    const virtual: number[] = []
    for (const r of requests) {
      vf.submit(0, r.virtual, { at: vf.now + 100, onFinish: (res) => virtual.push(res.ttftMs) })
      vf.run()
    }
    expect(reply.usage.completion_tokens).toBe(1)
    expect(virtual.length).toBe(4)
    // the model's own numbers differ a lot between these requests...
    expect(virtual[1]!).toBeLessThan(virtual[0]! / 2)
    // ...and each live TTFT is the virtual one plus HTTP and timer latency
    for (const [i, v] of virtual.entries()) {
      expect(live[i]!).toBeGreaterThan(v - 3)
      expect(live[i]!).toBeLessThan(v + Math.max(30, 0.25 * v))
    }
    // inside the worker the TTFTs are the model's, to the microsecond
    const m = await scrape(u)
    const liveSum = metric(m, 'vllm:time_to_first_token_seconds_sum') * 1000
    const virtualSum = metric(parsePrometheus(vf.metrics(0)), 'vllm:time_to_first_token_seconds_sum') * 1000
    expect(Math.abs(liveSum - virtualSum)).toBeLessThan(0.01)
  })

  it('--time-scale runs the same model faster in wall time', async () => {
    const body = { prompt: promptOf(1000, 'scaled'), max_tokens: 10 }
    const slow = await fleet({ profile: 'llama-3.1-70b-p5', timeScale: 1 })
    const fast = await fleet({ profile: 'llama-3.1-70b-p5', timeScale: 20 })
    const a = await post(slow.urls[0]!, '/v1/completions', body)
    const b = await post(fast.urls[0]!, '/v1/completions', body)
    expect(b.body.usage).toEqual(a.body.usage)
    expect(b.ms).toBeLessThan(a.ms / 3)
  })
})
