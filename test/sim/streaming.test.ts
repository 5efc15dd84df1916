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
    const body = { prompt: promptOf(100, 'fast'), max_tokens: 300 } // tiny: ~600 simulated ms
    const a = await post((await fleet({ timeScale: 5 })).urls[0]!, '/v1/completions', body)
    const b = await post((await fleet({ timeScale: 500 })).urls[0]!, '/v1/completions', body)
    expect(a.body.usage.completion_tokens).toBe(300)
    expect(b.body.usage.completion_tokens).toBe(300)
    // 100x faster in the model; one timer tick per step would make it ~no faster than 5x
    expect(b.ms).toBeLessThan(a.ms / 5)
  })
})
