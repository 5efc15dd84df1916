import http2 from 'node:http2'
import { describe, expect, it } from 'vitest'
import { fleet, post } from './helpers.js'

function h2request(url: string, path: string, body: object): Promise<{ status: number; headers: http2.IncomingHttpHeaders; text: string }> {
  return new Promise((resolve, reject) => {
    const session = http2.connect(url)
    session.on('error', reject)
    const req = session.request({ ':method': 'POST', ':path': path, 'content-type': 'application/json' })
    let headers: http2.IncomingHttpHeaders = {}
    let text = ''
    req.on('response', (h) => (headers = h))
    req.setEncoding('utf8')
    req.on('data', (d: string) => (text += d))
    req.on('end', () => {
      session.close()
      resolve({ status: Number(headers[':status']), headers, text })
    })
    req.on('error', reject)
    req.end(JSON.stringify(body))
  })
}

describe('--h2c', () => {
  it('serves HTTP/2 with prior knowledge and HTTP/1.1 on the same port', async () => {
    const { urls } = await fleet({ h2c: true })
    const chat = { messages: [{ role: 'user', content: 'over h2c' }], max_tokens: 3 }
    const r = await h2request(urls[0]!, '/v1/chat/completions', chat)
    expect(r.status).toBe(200)
    expect(r.headers['x-sim-instance']).toBe('sim-0')
    expect(JSON.parse(r.text).usage.completion_tokens).toBe(3)
    const s = await h2request(urls[0]!, '/v1/chat/completions', { ...chat, stream: true })
    expect(s.headers['content-type']).toBe('text/event-stream; charset=utf-8')
    expect(s.text.trimEnd().endsWith('data: [DONE]')).toBe(true)
    const bad = await h2request(urls[0]!, '/v1/chat/completions', { nope: 1 })
    expect(bad.status).toBe(400)
    expect(JSON.parse(bad.text).error.code).toBe(400)
    const h1 = await post(urls[0]!, '/v1/chat/completions', chat)
    expect(h1.status).toBe(200)
  })
})
