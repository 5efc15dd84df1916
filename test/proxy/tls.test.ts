// TLS on the front port with ALPN: HTTP/2 and HTTP/1.1 clients both get through.
import { execFileSync } from 'node:child_process'
import { mkdtempSync, rmSync } from 'node:fs'
import http2 from 'node:http2'
import https from 'node:https'
import { tmpdir } from 'node:os'
import { join } from 'node:path'
import { fileURLToPath } from 'node:url'
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

describe('TLS upstreams', () => {
  it('forwards over HTTP/2 with TLS (ALPN h2) to an instance whose CA is in NODE_EXTRA_CA_CERTS', async () => {
    const { spawn } = await import('node:child_process')
    const { readFileSync } = await import('node:fs')
    let sawVersion = ''
    const upstream = http2.createSecureServer({ cert: readFileSync(join(dir, 'cert.pem')), key: readFileSync(join(dir, 'key.pem')) }, (req, res) => {
      sawVersion = req.httpVersion
      req.resume()
      req.on('end', () => {
        res.writeHead(200, { 'content-type': 'application/json' })
        res.end('{"over":"h2"}')
      })
    })
    await new Promise<void>((r) => upstream.listen(0, '127.0.0.1', r))
    const port = (upstream.address() as import('node:net').AddressInfo).port
    const cli = fileURLToPath(new URL('../../dist/cli.js', import.meta.url))
    const child = spawn(process.execPath, [cli, 'serve', '--upstream', `https://localhost:${port}`, '--upstream-protocol', 'h2', '--port', '0', '--admin-port', '0', '--host', '127.0.0.1', '--log-level', 'warn', '--drain-delay-ms', '0'], {
      env: { ...process.env, NODE_EXTRA_CA_CERTS: join(dir, 'cert.pem') },
    })
    try {
      const url = await new Promise<string>((resolve, reject) => {
        let err = ''
        child.stderr.on('data', (d: Buffer) => {
          err += d.toString()
          const m = /on (http:\/\/[\d.:]+) \(admin/.exec(err)
          if (m) resolve(m[1]!)
        })
        child.once('exit', (c) => reject(new Error(`serve exited ${c}: ${err}`)))
      })
      const res = await fetch(`${url}/v1/chat/completions`, { method: 'POST', body: chat('to a TLS upstream'), headers: { 'content-type': 'application/json' } })
      expect(res.status).toBe(200)
      expect(await res.json()).toEqual({ over: 'h2' })
      expect(sawVersion).toBe('2.0')
    } finally {
      child.kill('SIGTERM')
      upstream.close()
    }
  })
})
