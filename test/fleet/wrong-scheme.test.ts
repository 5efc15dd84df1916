// An instance URL with the wrong scheme: https:// to a plain-HTTP server, http:// to a TLS one.
// The raw errors (an OpenSSL "wrong version number", a closed socket) say nothing useful; the
// probe's error, the log and /admin/instances must say which scheme the instance speaks.
import { execFileSync } from 'node:child_process'
import http from 'node:http'
import https from 'node:https'
import { mkdtempSync, readFileSync } from 'node:fs'
import net from 'node:net'
import { tmpdir } from 'node:os'
import { join } from 'node:path'
import { Pool, request } from 'undici'
import { afterEach, beforeAll, describe, expect, it } from 'vitest'
import { upstreamError } from '../../src/request/errors.js'
import { ProxyServer } from '../../src/proxy/proxy.js'
import { capturedLog } from '../faults/log-lines.js'
import { chat, post, testConfig } from '../proxy/helpers.js'

const dir = mkdtempSync(join(tmpdir(), 'wrong-scheme-'))
let tlsOptions: { key: Buffer; cert: Buffer }
beforeAll(() => {
  execFileSync('openssl', ['req', '-x509', '-newkey', 'rsa:2048', '-nodes', '-days', '1', '-subj', '/CN=localhost', '-keyout', join(dir, 'key.pem'), '-out', join(dir, 'cert.pem')], { stdio: 'ignore' })
  tlsOptions = { key: readFileSync(join(dir, 'key.pem')), cert: readFileSync(join(dir, 'cert.pem')) }
})

const servers: net.Server[] = []
let router: ProxyServer | undefined
afterEach(async () => {
  await router?.close()
  router = undefined
  for (const s of servers.splice(0)) await new Promise((r) => s.close(r))
})

async function listen<S extends net.Server>(s: S): Promise<{ server: S; port: number }> {
  await new Promise<void>((r) => s.listen(0, '127.0.0.1', r))
  servers.push(s)
  return { server: s, port: (s.address() as net.AddressInfo).port }
}

const answer = (_req: http.IncomingMessage, res: http.ServerResponse) => {
  res.writeHead(200, { 'content-type': 'application/json' })
  res.end('{}')
}

async function probed(url: string) {
  const { logger, lines } = capturedLog()
  router = await ProxyServer.start(testConfig([{ name: 'default', instances: [url] }]), { logger })
  const body = (await (await fetch(`${router.adminUrl}/admin/instances`)).json()) as { endpoints: { instances: { healthy: boolean; lastError: string | null }[] }[] }
  return { inst: body.endpoints[0]!.instances[0]!, down: lines.find((l) => l.msg === 'instance down') }
}

describe('an instance URL with the wrong scheme', () => {
  it('https:// to a plain-HTTP instance: the probe error says to use http://', async () => {
    const { port } = await listen(http.createServer(answer))
    const { inst, down } = await probed(`https://127.0.0.1:${port}`)
    expect(inst.healthy).toBe(false)
    expect(inst.lastError).toMatch(new RegExp(`^health check failed: instance speaks plain HTTP: use http://127\\.0\\.0\\.1:${port} \\(ERR_SSL_`))
    expect(down?.reason).toBe(inst.lastError)
    // Traffic finds no instance to go to, and the client is told why in the router's terms.
    expect((await post(`${router!.url}/v1/chat/completions`, chat('x'))).status).toBe(503)
  })

  it('http:// to a TLS instance: the probe error says to use https://', async () => {
    const { port } = await listen(https.createServer(tlsOptions, answer))
    const { inst, down } = await probed(`http://127.0.0.1:${port}/`)
    expect(inst.healthy).toBe(false)
    expect(inst.lastError).toBe(`health check failed: instance speaks TLS: use https://127.0.0.1:${port} (other side closed)`)
    expect(down?.reason).toBe(inst.lastError)
  })

  it('an instance that closes a plain-HTTP connection but does not speak TLS gets no such hint', async () => {
    const { port } = await listen(net.createServer((s) => s.destroy()))
    const { inst } = await probed(`http://127.0.0.1:${port}`)
    expect(inst.lastError).toMatch(/^health check failed: /)
    expect(inst.lastError).not.toMatch(/speaks/)
  })

  it("a forwarded request's error says the same, from the error alone", async () => {
    const { port: plainPort } = await listen(http.createServer(answer))
    const tlsErr = await request(`https://127.0.0.1:${plainPort}/`, { dispatcher: new Pool(`https://127.0.0.1:${plainPort}`) }).catch((e: unknown) => e)
    expect(upstreamError(tlsErr).message).toMatch(/^the instance failed: instance speaks plain HTTP: use http:\/\/ \(ERR_SSL_/)
    // A TLS speaker that answers plain text with an alert record (0x15 0x03 ...), as OpenSSL servers may.
    const { port: alertPort } = await listen(net.createServer((s) => s.once('data', () => s.end(Buffer.from([0x15, 0x03, 0x03, 0x00, 0x02, 0x02, 0x46])))))
    const parseErr = await request(`http://127.0.0.1:${alertPort}/`, { dispatcher: new Pool(`http://127.0.0.1:${alertPort}`) }).catch((e: unknown) => e)
    expect(upstreamError(parseErr).message).toMatch(/^the instance failed: instance speaks TLS: use https:\/\/ \(/)
  })
})
