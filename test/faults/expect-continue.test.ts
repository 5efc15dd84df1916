// Expect: 100-continue is answered by the router, never forwarded (the instance's client
// refuses it): 100 then the instance's answer, or 413 without a 100 when the declared body is
// over the limit; over HTTP/1.1 (curl, a raw client) and HTTP/2.
import { execFile } from 'node:child_process'
import { mkdtempSync, rmSync, writeFileSync } from 'node:fs'
import http2 from 'node:http2'
import { tmpdir } from 'node:os'
import { join } from 'node:path'
import { promisify } from 'node:util'
import { afterAll, describe, expect, it } from 'vitest'
import { chatBody, raw, useSimRouter } from './front-helpers.js'

const run = promisify(execFile)
const ctx = useSimRouter()
const LIMIT = 64 * 1024
const dir = mkdtempSync(join(tmpdir(), 'expect-'))
afterAll(() => rmSync(dir, { recursive: true, force: true }))

// About 12k tokens for the simulator: under its context length, well over curl's own threshold for Expect.
const body = chatBody('Tell me about the sea. '.repeat(2000))

function headers(length: number): string {
  return `POST /v1/chat/completions HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\nContent-Length: ${length}\r\nExpect: 100-continue\r\n\r\n`
}

describe('Expect: 100-continue over HTTP/1.1', () => {
  it('curl gets 100, then the instance answer', async () => {
    const router = await ctx.start({ limits: { maxBodyBytes: LIMIT } })
    const file = join(dir, 'body.json')
    writeFileSync(file, body)
    const { stdout, stderr } = await run('curl', ['-sS', '-v', '--http1.1', '-H', 'content-type: application/json', '-H', 'Expect: 100-continue', '--data-binary', `@${file}`, '-w', '\n%{http_code}', `${router.url}/v1/chat/completions`])
    expect(stderr).toMatch(/< HTTP\/1\.1 100 Continue/)
    expect(stdout.trim().split('\n').at(-1)).toBe('200')
    expect(stdout).toContain('"chat.completion"')
  })

  it('a raw client sends its body only after the 100, and gets 200', async () => {
    const router = await ctx.start({ limits: { maxBodyBytes: LIMIT } })
    const s = await raw(router.url)
    s.socket.write(headers(Buffer.byteLength(body)))
    await s.waitFor('HTTP/1.1 100 Continue\r\n\r\n')
    s.socket.write(body)
    await s.waitFor('"chat.completion"')
    expect(s.received).toMatch(/^HTTP\/1\.1 100 Continue\r\n\r\nHTTP\/1\.1 200 /)
    s.socket.destroy()
  })

  it('a declared body over the limit gets 413 without a 100, and the connection is closed', async () => {
    const router = await ctx.start({ limits: { maxBodyBytes: LIMIT } })
    const s = await raw(router.url)
    s.socket.write(headers(LIMIT + 1))
    await s.closed
    expect(s.received).toMatch(/^HTTP\/1\.1 413 /)
    expect(s.received).not.toContain('100 Continue')
    expect(s.received).toMatch(/\r\nconnection: close\r\n/i)
    const json = JSON.parse(s.received.slice(s.received.indexOf('\r\n\r\n') + 4)) as { error: Record<string, string> }
    expect(json.error).toMatchObject({ type: 'invalid_request_error', code: 'request_too_large' })
    expect(json.error.message).toContain(String(LIMIT))
  })

  it('curl with a body over the limit gets 413', async () => {
    const router = await ctx.start({ limits: { maxBodyBytes: 1024 } })
    const file = join(dir, 'big.json')
    writeFileSync(file, body)
    const { stdout, stderr } = await run('curl', ['-sS', '-v', '--http1.1', '-H', 'content-type: application/json', '-H', 'Expect: 100-continue', '--data-binary', `@${file}`, '-w', '\n%{http_code}', `${router.url}/v1/chat/completions`])
    expect(stderr).not.toMatch(/< HTTP\/1\.1 100/)
    expect(stdout.trim().split('\n').at(-1)).toBe('413')
    expect(stdout).toContain('request_too_large')
  })
})

describe('Expect: 100-continue over HTTP/2', () => {
  function request(url: string, length: number, send: string | undefined) {
    return new Promise<{ continued: boolean; status: number; text: string }>((resolve, reject) => {
      const session = http2.connect(url)
      session.on('error', reject)
      const s = session.request({ ':method': 'POST', ':path': '/v1/chat/completions', 'content-type': 'application/json', 'content-length': String(length), expect: '100-continue' })
      let continued = false
      let status = 0
      let text = ''
      s.on('continue', () => {
        continued = true
        s.end(send)
      })
      s.on('response', (h) => (status = Number(h[':status'])))
      s.setEncoding('utf8')
      s.on('data', (d: string) => (text += d))
      s.on('end', () => session.close(() => resolve({ continued, status, text })))
      s.on('error', reject)
    })
  }

  it('gets 100, then the instance answer', async () => {
    const router = await ctx.start({ limits: { maxBodyBytes: LIMIT } })
    const r = await request(router.url, Buffer.byteLength(body), body)
    expect(r.continued).toBe(true)
    expect(r.status).toBe(200)
    expect(r.text).toContain('"chat.completion"')
  })

  it('a declared body over the limit gets 413 without a 100', async () => {
    const router = await ctx.start({ limits: { maxBodyBytes: LIMIT } })
    const r = await request(router.url, LIMIT + 1, undefined)
    expect(r.continued).toBe(false)
    expect(r.status).toBe(413)
    expect(JSON.parse(r.text)).toMatchObject({ error: { type: 'invalid_request_error', code: 'request_too_large' } })
  })
})
