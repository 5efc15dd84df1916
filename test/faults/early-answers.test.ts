// Answers the router gives before it has read the whole body (JSON nested too deep, a body over
// the limit) reach a client that is still uploading. Closed at once, the connection was reset
// with the body unread, and a client busy sending (Node's http, curl) got ECONNRESET or EPIPE
// instead of the answer; the rest of the body is now read and thrown away first, within the
// body limit and timeout.
import { execFile } from 'node:child_process'
import { mkdtempSync, rmSync, writeFileSync } from 'node:fs'
import http from 'node:http'
import net from 'node:net'
import { tmpdir } from 'node:os'
import { join } from 'node:path'
import { afterAll, describe, expect, it } from 'vitest'
import { MODEL, useSimRouter } from './front-helpers.js'

const dir = mkdtempSync(join(tmpdir(), 'pr-early-'))
afterAll(() => rmSync(dir, { recursive: true, force: true }))
const ctx = useSimRouter()

/** A chat body of `bytes` whose `x` nests 300 arrays deep at its start, then is a long string. */
function deepBody(bytes: number): Buffer {
  const head = `{"model":"${MODEL}","messages":[{"role":"user","content":"hi"}],"x":[${'['.repeat(299)}`
  const tail = `${']'.repeat(300)},"pad":"`
  const b = Buffer.alloc(bytes, 0x61)
  b.write(head, 0, 'latin1')
  b.write(tail, head.length, 'latin1')
  b.write('"}', bytes - 2, 'latin1')
  return b
}

/** A valid chat body of `bytes`, most of them one string. */
function plainBody(bytes: number): Buffer {
  const head = `{"model":"${MODEL}","messages":[{"role":"user","content":"hi"}],"pad":"`
  const b = Buffer.alloc(bytes, 0x61)
  b.write(head, 0, 'latin1')
  b.write('"}', bytes - 2, 'latin1')
  return b
}

interface Answer {
  status: number
  text: string
  headers: http.IncomingHttpHeaders
}

/**
 * Sends `body` 64 KiB at a time, each write waiting for the last to drain, so the client is
 * still sending when the answer comes; resolves with the answer, rejects if the connection
 * fails before one arrives.
 */
function upload(url: string, body: Buffer, headers: Record<string, string | number>): Promise<Answer> {
  return new Promise((resolve, reject) => {
    const req = http.request(`${url}/v1/chat/completions`, { method: 'POST', agent: false, headers: { 'content-type': 'application/json', ...headers } }, (res) => {
      let text = ''
      res.setEncoding('utf8')
      res.on('data', (d: string) => (text += d))
      res.on('end', () => resolve({ status: res.statusCode ?? 0, text, headers: res.headers }))
      res.on('error', reject)
    })
    req.on('error', reject)
    let at = 0
    const more = () => {
      while (at < body.length && !req.destroyed) {
        const chunk = body.subarray(at, at + 64 * 1024)
        at += chunk.length
        if (!req.write(chunk)) return void req.once('drain', more)
      }
      if (!req.destroyed) req.end()
    }
    more()
  })
}

/**
 * A client that reads its answer only once it has sent the whole body, as blocking clients
 * (Python's http.client, many SDKs) do: everything the router sent by the time it closed, and
 * the error the upload failed with, if any.
 */
function uploadThenRead(url: string, head: string, body: Buffer): Promise<{ received: string; error: string }> {
  return new Promise((resolve) => {
    const socket = net.connect(Number(new URL(url).port), '127.0.0.1')
    let received = ''
    let error = ''
    socket.pause()
    socket.on('data', (d: Buffer) => (received += d.toString('latin1')))
    socket.on('error', (e: NodeJS.ErrnoException) => (error ||= e.code ?? e.message))
    socket.on('close', () => resolve({ received, error }))
    socket.once('connect', () => {
      let at = 0
      socket.write(head)
      const more = () => {
        while (at < body.length && !socket.destroyed) {
          const chunk = body.subarray(at, at + 64 * 1024)
          at += chunk.length
          if (!socket.write(chunk)) return void socket.once('drain', more)
        }
        socket.resume()
      }
      more()
    })
  })
}

const h1Head = (headers: string) => `POST /v1/chat/completions HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n${headers}\r\n`

/** `body` in HTTP/1.1 chunks of 64 KiB, with the last chunk. */
function chunked(body: Buffer): Buffer {
  const parts: Buffer[] = []
  for (let at = 0; at < body.length; at += 64 * 1024) {
    const c = body.subarray(at, at + 64 * 1024)
    parts.push(Buffer.from(`${c.length.toString(16)}\r\n`), c, Buffer.from('\r\n'))
  }
  parts.push(Buffer.from('0\r\n\r\n'))
  return Buffer.concat(parts)
}

const code = (text: string) => (JSON.parse(text) as { error: { code: string } }).error.code

function curl(args: string[]): Promise<{ exit: number; out: string; err: string }> {
  return new Promise((resolve) => {
    execFile('curl', ['-sS', '--max-time', '120', ...args], { maxBuffer: 1 << 20 }, (e, out, err) => resolve({ exit: e ? ((e as { code?: number }).code ?? 1) : 0, out, err }))
  })
}

describe('an answer given before the body was read arrives while the client is still sending', () => {
  it('json_too_deep, to a client that reads only after sending 12 MiB', async () => {
    const router = await ctx.start()
    const body = deepBody(12 * 1024 * 1024)
    for (let i = 0; i < 2; i++) {
      const r = await uploadThenRead(router.url, h1Head(`Content-Length: ${body.length}\r\n`), body)
      expect(r.error).toBe('')
      expect(r.received).toMatch(/^HTTP\/1\.1 400 [^]*\r\nconnection: close\r\n[^]*"json_too_deep"/i)
    }
  })

  it('413 for a chunked body that grows past the limit, to a client that reads after', async () => {
    const router = await ctx.start({ limits: { maxBodyBytes: 8 * 1024 * 1024 } })
    const r = await uploadThenRead(router.url, h1Head('Transfer-Encoding: chunked\r\n'), chunked(plainBody(15 * 1024 * 1024)))
    expect(r.error).toBe('')
    expect(r.received).toMatch(/^HTTP\/1\.1 413 [^]*"request_too_large"/)
  })

  it('json_too_deep, to Node http uploading 12 MiB', async () => {
    const router = await ctx.start()
    const body = deepBody(12 * 1024 * 1024)
    for (let i = 0; i < 3; i++) {
      const res = await upload(router.url, body, { 'content-length': body.length })
      expect(res.status).toBe(400)
      expect(code(res.text)).toBe('json_too_deep')
      expect(res.headers.connection).toBe('close')
    }
  })

  it('json_too_deep, to curl uploading a 12 MiB file at 4 MB/s', async () => {
    const router = await ctx.start()
    const file = join(dir, 'deep.json')
    writeFileSync(file, deepBody(12 * 1024 * 1024))
    // No Expect: 100-continue, so curl sends the body at once, as most clients do.
    const r = await curl(['--limit-rate', '4M', '-H', 'content-type: application/json', '-H', 'Expect:', '--data-binary', `@${file}`, `${router.url}/v1/chat/completions`])
    expect(r.err).toBe('')
    expect(r.exit).toBe(0)
    expect(code(r.out)).toBe('json_too_deep')
  })

  it('413 for a declared length over the limit, to a client sending it anyway', async () => {
    const router = await ctx.start({ limits: { maxBodyBytes: 1024 * 1024 } })
    const body = plainBody(Math.floor(1.5 * 1024 * 1024))
    const res = await upload(router.url, body, { 'content-length': body.length })
    expect(res.status).toBe(413)
    expect(code(res.text)).toBe('request_too_large')
  })

  it('413 for a chunked body that grows past the limit', async () => {
    const router = await ctx.start({ limits: { maxBodyBytes: 1024 * 1024 } })
    const body = plainBody(Math.floor(1.5 * 1024 * 1024))
    const res = await upload(router.url, body, { 'transfer-encoding': 'chunked' })
    expect(res.status).toBe(413)
    expect(code(res.text)).toBe('request_too_large')
  })

  it('a body that goes on far past the limit: the answer still arrives, then the connection is closed', async () => {
    // 1 MiB limit: the router reads at most that much more of a body it has answered, then closes;
    // the test ends only once the client's request has closed.
    const router = await ctx.start({ limits: { maxBodyBytes: 1024 * 1024 } })
    const body = deepBody(8 * 1024 * 1024)
    const closed = await new Promise<{ status: number; error: string }>((resolve) => {
      let status = 0
      const req = http.request(`${router.url}/v1/chat/completions`, { method: 'POST', agent: false, headers: { 'content-type': 'application/json', 'content-length': body.length } }, (res) => {
        status = res.statusCode ?? 0
        res.resume()
      })
      req.on('error', (e) => resolve({ status, error: (e as NodeJS.ErrnoException).code ?? e.message }))
      req.on('close', () => resolve({ status, error: '' }))
      req.end(body)
    })
    expect(closed.status).toBe(413)
  })
})
