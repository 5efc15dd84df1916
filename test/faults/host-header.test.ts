// RFC 9112 section 3.2: an HTTP/1.1 request with more than one Host line, or none, gets 400.
// Two Hosts can make the router and a proxy in front of it disagree about which one a
// request is for; Node keeps the first and drops the rest without a word.
import { describe, expect, it } from 'vitest'
import { chatBody, raw, useSimRouter } from './front-helpers.js'

// Short keep-alive: an answer that leaves the connection open is seen closing soon after.
const FAST = { limits: { keepAliveTimeoutMs: 300 } }
const ctx = useSimRouter()

/** Sends `request` on a fresh connection; what the router answered by the time it closed. */
async function exchange(url: string, request: string): Promise<string> {
  const s = await raw(url)
  s.socket.write(request)
  await s.closed
  return s.received
}

const errorOf = (received: string) => JSON.parse(received.slice(received.indexOf('\r\n\r\n') + 4)) as { error: { code: string; type: string; message: string } }

describe('the Host header', () => {
  it('two Host lines get 400 invalid_host and the connection is closed', async () => {
    const router = await ctx.start(FAST)
    const got = await exchange(router.url, 'GET /ping HTTP/1.1\r\nHost: a.example\r\nHost: b.example\r\n\r\n')
    expect(got).toMatch(/^HTTP\/1\.1 400 /)
    expect(got).toMatch(/\r\nconnection: close\r\n/i)
    expect(errorOf(got).error).toMatchObject({ code: 'invalid_host', type: 'invalid_request_error' })
  })

  it('the same Host twice, in either case, is refused too; on a proxied route nothing reaches an instance', async () => {
    const router = await ctx.start(FAST)
    const body = chatBody('two hosts')
    const got = await exchange(router.url, `POST /v1/chat/completions HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\nhost: x\r\nContent-Length: ${Buffer.byteLength(body)}\r\n\r\n${body}`)
    expect(got).toMatch(/^HTTP\/1\.1 400 /)
    expect(errorOf(got).error.code).toBe('invalid_host')
    expect(got).not.toContain('"choices"')
  })

  it('one Host is served, and an HTTP/1.1 request with none gets 400', async () => {
    const router = await ctx.start(FAST)
    const s = await raw(router.url)
    s.socket.write('GET /ping HTTP/1.1\r\nHost: x\r\n\r\n')
    await s.waitFor('\r\n0\r\n\r\n')
    expect(s.received).toMatch(/^HTTP\/1\.1 200 /)
    s.socket.destroy()
    expect(await exchange(router.url, 'GET /ping HTTP/1.1\r\n\r\n')).toMatch(/^HTTP\/1\.1 400 /)
  })
})
