// Streaming under a slow reader, and at time scales whose steps are shorter than a timer tick.
import http from 'node:http'
import { describe, expect, it } from 'vitest'
import { fillerText } from '../../src/sim/index.js'
import { fleet, post, promptOf } from './helpers.js'

describe('SSE backpressure', () => {
  it('coalesces tokens while the client does not read, and loses none', async () => {
    // 1000x time scale: the engine produces the 20,000 tokens in well under a second of wall time
    const { urls, workers } = await fleet({ timeScale: 1000 })
    const n = 20_000
    const { chunks, content } = await new Promise<{ chunks: number; content: string }>((resolve, reject) => {
      const req = http.request(`${urls[0]}/v1/completions`, { method: 'POST' }, (res) => {
        res.pause() // read nothing until the engine is done
        const poll = setInterval(() => {
          if (workers[0]!.engine.inFlight > 0) return
          clearInterval(poll)
          let text = ''
          res.setEncoding('utf8')
          res.on('data', (d: string) => (text += d))
          res.on('end', () => {
            const events = text.split('\n\n').filter((e) => e.startsWith('data: {'))
            const pieces = events.map((e) => JSON.parse(e.slice(6)).choices[0].text as string)
            resolve({ chunks: events.length, content: pieces.join('') })
          })
          res.resume()
        }, 20)
      })
      req.on('error', reject)
      req.end(JSON.stringify({ prompt: 'slow reader', max_tokens: n, stream: true }))
    })
    expect(content).toBe(fillerText(0, n))
    expect(chunks).toBeLessThan(n) // merged while the socket was full
    expect(chunks).toBeGreaterThan(0)
  })
})

describe('high time scales', () => {
  it('runs steps shorter than the timer resolution at the requested speed', async () => {
    const body = (tag: string) => ({ prompt: promptOf(100, tag), max_tokens: 300 }) // tiny: ~600 simulated ms
    const a = await post((await fleet({ timeScale: 1 })).urls[0]!, '/v1/completions', body('fast'))
    expect(a.body.usage.completion_tokens).toBe(300)
    const fast = (await fleet({ timeScale: 500 })).urls[0]!
    let b = Infinity
    for (let i = 0; i < 3; i++) {
      const r = await post(fast, '/v1/completions', body(`fast ${i}`))
      expect(r.body.usage.completion_tokens).toBe(300)
      b = Math.min(b, r.ms)
    }
    // 500x faster in the model (~1 ms), where one timer tick per step would take 300 ms or more.
    // A busy machine adds tens of ms to any request: the slow one runs at scale 1 (600 ms) so a
    // fifth of it stays well above that, and the quickest of three fast ones is compared.
    expect(b).toBeLessThan(a.ms / 5)
  })
})
