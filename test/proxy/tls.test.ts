// TLS on the front port with ALPN: HTTP/2 and HTTP/1.1 clients both get through.
import { execFileSync } from 'node:child_process'
import { mkdtempSync, rmSync } from 'node:fs'
import http2 from 'node:http2'
import https from 'node:https'
import { tmpdir } from 'node:os'
import { join } from 'node:path'
import { afterAll, beforeAll, describe, expect, it } from 'vitest'
import type { ProxyServer } from '../../src/proxy/proxy.js'
import { chat, h2Request, startRouter, startStub, totalInFlight, type Stub } from './helpers.js'

let dir: string
let stub: Stub
let router: ProxyServer

beforeAll(async () => {
  dir = mkdtempSync(join(tmpdir(), 'pr-tls-'))
  execFileSync('openssl', ['req', '-x509', '-newkey', 'rsa:2048', '-nodes', '-days', '1', '-subj', '/CN=localhost', '-keyout', join(dir, 'key.pem'), '-out', join(dir, 'cert.pem')], { stdio: 'ignore' })
  stub = await startStub('tls-upstream')
  router = await startRouter([stub.url], { tls: { cert: join(dir, 'cert.pem'), key: join(dir, 'key.pem') } })
})
afterAll(async () => {
  expect(totalInFlight(router)).toBe(0)
  await router.close()
  await stub.close()
  rmSync(dir, { recursive: true, force: true })
})

describe('TLS front', () => {
  it('serves h2 to a client that offers it (ALPN)', async () => {
    expect(router.url.startsWith('https://')).toBe(true)
    const session = http2.connect(router.url, { rejectUnauthorized: false })
    const { status, body } = await h2Request(session, '/v1/chat/completions', chat('over tls'))
    const alpn = session.alpnProtocol
    session.close()
    expect(alpn).toBe('h2')
    expect(status).toBe(200)
    expect(JSON.parse(body)).toMatchObject({ stub: 'tls-upstream' })
  })

  it('serves HTTP/1.1 to a client that offers only http/1.1', async () => {
    const res = await new Promise<{ status: number; body: string; alpn: string | false | null }>((resolve, reject) => {
      const req = https.request(`${router.url}/v1/chat/completions`, { method: 'POST', rejectUnauthorized: false, ALPNProtocols: ['http/1.1'], headers: { 'content-type': 'application/json' } } as https.RequestOptions, (r) => {
        let body = ''
        const alpn = (r.socket as import('node:tls').TLSSocket).alpnProtocol // the socket is detached by 'end'
        r.setEncoding('utf8')
        r.on('data', (d: string) => (body += d))
        r.on('end', () => resolve({ status: r.statusCode ?? 0, body, alpn }))
      })
      req.on('error', reject)
      req.end(chat('over tls 1.1'))
    })
    expect(res.alpn).toBe('http/1.1')
    expect(res.status).toBe(200)
    expect(JSON.parse(res.body)).toMatchObject({ stub: 'tls-upstream' })
  })
})
