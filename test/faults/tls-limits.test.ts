// The same client limits and drain on the TLS front (ALPN h2 and http/1.1): a silent socket
// never finishes its handshake and is closed, the HTTP/1.1 and HTTP/2 timeouts apply after it,
// Expect: 100-continue is answered, and the drain hooks behave as on the cleartext port.
import { execFileSync } from 'node:child_process'
import { mkdtempSync, rmSync } from 'node:fs'
import http2 from 'node:http2'
import { tmpdir } from 'node:os'
import { join } from 'node:path'
import { afterAll, afterEach, describe, expect, it } from 'vitest'
import { handle } from '../../src/proxy/handler.js'
import { listenFront, type FrontServer } from '../../src/proxy/server.js'
import { until } from '../proxy/helpers.js'
import { chatBody, h1Post, h2Post, raw, useSimRouter } from './front-helpers.js'

const dir = mkdtempSync(join(tmpdir(), 'pr-tls-limits-'))
execFileSync('openssl', ['req', '-x509', '-newkey', 'rsa:2048', '-nodes', '-days', '1', '-subj', '/CN=localhost', '-keyout', join(dir, 'key.pem'), '-out', join(dir, 'cert.pem')], { stdio: 'ignore' })
afterAll(() => rmSync(dir, { recursive: true, force: true }))

const TLS = { tls: { cert: join(dir, 'cert.pem'), key: join(dir, 'key.pem') }, limits: { headersTimeoutMs: 1000, keepAliveTimeoutMs: 300 } }
const ctx = useSimRouter()
let front: FrontServer | undefined
afterEach(async () => {
  await front?.close()
  front = undefined
})

const connect = (url: string) => http2.connect(url, { rejectUnauthorized: false })
const plain = (url: string) => url.replace('https:', 'http:') // a TCP connection that never starts TLS

describe('TLS front: client limits', () => {
  it('a socket that never starts the handshake is closed', async () => {
    const router = await ctx.start(TLS)
    const s = await raw(plain(router.url))
    await s.closed
    expect(s.received).toBe('')
  })

  it('HTTP/1.1: a partial request line gets 408; an idle connection is closed', async () => {
    const router = await ctx.start(TLS)
    const partial = await raw(router.url)
    partial.socket.write('POST /v1/chat/comp')
    await partial.closed
    expect(partial.received).toMatch(/^HTTP\/1\.1 408 /)
    const idle = await raw(router.url)
    idle.socket.write(h1Post(chatBody('then idle')))
    await idle.closed
    expect(idle.received).toMatch(/^HTTP\/1\.1 200 [^]*"chat\.completion"/)
  })

  it('HTTP/2: a session without a request, and one idle after its answer, get GOAWAY', async () => {
    const router = await ctx.start(TLS)
    const quiet = connect(router.url)
    const quietGoaway = new Promise((r) => quiet.once('goaway', r))
    await new Promise((r) => quiet.once('close', r))
    await quietGoaway
    const idle = connect(router.url)
    const idleGoaway = new Promise((r) => idle.once('goaway', r))
    const idleClosed = new Promise((r) => idle.once('close', r))
    expect((await h2Post(idle, chatBody('then idle'))).status).toBe(200)
    await idleGoaway
    await idleClosed
  })

  it('Expect: 100-continue over HTTP/1.1 gets 100 then the answer', async () => {
    const router = await ctx.start(TLS)
    const s = await raw(router.url)
    const body = chatBody('continue over TLS')
    s.socket.write(`POST /v1/chat/completions HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\nContent-Length: ${Buffer.byteLength(body)}\r\nExpect: 100-continue\r\n\r\n`)
    await s.waitFor('HTTP/1.1 100 Continue\r\n\r\n')
    s.socket.write(body)
    await s.waitFor('"chat.completion"')
    expect(s.received).toMatch(/^HTTP\/1\.1 100 Continue\r\n\r\nHTTP\/1\.1 200 /)
    s.socket.destroy()
  })
})

describe('TLS front: drain', () => {
  it('after beginDrain HTTP/1.1 answers close and sessions get GOAWAY after their stream; stopAccepting and destroyAll', async () => {
    const router = await ctx.start({ ...TLS, limits: {} })
    front = await listenFront({ ...router.config, listen: { host: '127.0.0.1', port: 0 } }, (req, res) => void handle(router, req, res))
    const url = `https://127.0.0.1:${front.address.port}`
    const silent = await raw(url)
    front.beginDrain()
    const a = await raw(url)
    a.socket.write(h1Post(chatBody('while draining')))
    await a.closed
    expect(a.received).toMatch(/^HTTP\/1\.1 200 [^]*\r\nConnection: close\r\n/i)
    const session = connect(url)
    const goaway = new Promise((r) => session.once('goaway', r))
    expect((await h2Post(session, chatBody('while draining'))).status).toBe(200)
    await goaway
    await front.stopAccepting()
    front.destroyAll()
    await silent.closed
    await until(() => front!.openConnections() === 0, 30_000, 'no connection left')
  })
})
