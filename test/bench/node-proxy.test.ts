// bench/peers/node-proxy.mjs does what bench:ladder says each level does: the headers level
// forwards as RFC 9110 asks of a proxy, the route level picks as the library does and releases
// every lease, so that the ladder's steps measure that work and not something else.
import http from 'node:http'
import type { AddressInfo } from 'node:net'
import { afterAll, beforeAll, describe, expect, it } from 'vitest'
import { startNodeScript, stopStarted } from '../../bench/harness.js'
import { Router, routingKey } from '../../src/index.js'

interface Seen {
  raw: string[]
  body: Buffer
}

let upstream: http.Server
let upstreamUrl = ''
const seen: Seen[] = []
/** Requests the upstream holds unanswered until their connection closes ("hold" in the prompt). */
const held: { closed: Promise<void> }[] = []

beforeAll(async () => {
  upstream = http.createServer((req, res) => {
    const chunks: Buffer[] = []
    req.on('data', (c: Buffer) => chunks.push(c))
    req.on('end', () => {
      const body = Buffer.concat(chunks)
      seen.push({ raw: req.rawHeaders, body })
      if (body.includes('hold')) {
        held.push({ closed: new Promise((r) => res.once('close', () => r())) })
        return
      }
      res.writeHead(200, [
        ['content-type', 'application/json'],
        ['x-up', '1'],
        ['x-up', '2'],
        ['set-cookie', 'a=1'],
        ['set-cookie', 'b=2'],
        ['connection', 'keep-alive, x-up-hop'],
        ['x-up-hop', 'secret'],
        ['keep-alive', 'timeout=5'],
        ['trailer', 'x-tr'],
        ['x-request-id', 'the-upstream-id'],
      ].flat())
      res.end('{"ok":true}')
    })
  })
  await new Promise<void>((r) => upstream.listen(0, '127.0.0.1', r))
  upstreamUrl = `http://127.0.0.1:${(upstream.address() as AddressInfo).port}`
})

afterAll(async () => {
  await stopStarted()
  upstream.closeAllConnections()
  await new Promise((r) => upstream.close(r))
})

async function proxy(level: string, env: Record<string, string> = {}): Promise<string> {
  const p = await startNodeScript(['bench/peers/node-proxy.mjs', upstreamUrl, level], { DEBUG_HEADERS: '1', ...env })
  return `http://127.0.0.1:${p.match[1]}`
}

interface Answer {
  status: number
  raw: string[]
  headers: http.IncomingHttpHeaders
  body: string
}

/** A POST with these raw headers (repeats kept; Host added unless given), its body sent chunked. */
function send(url: string, path: string, headers: string[], body: string): Promise<Answer> {
  // Raw headers get no Host from Node's client, and Node's server refuses a request without one.
  const raw = headers.some((h, i) => i % 2 === 0 && h.toLowerCase() === 'host') ? headers : ['Host', new URL(url).host, ...headers]
  return new Promise((resolve, reject) => {
    const req = http.request(`${url}${path}`, { method: 'POST', headers: raw, agent: false }, (res) => {
      let text = ''
      res.setEncoding('utf8')
      res.on('data', (c: string) => (text += c))
      res.on('end', () => resolve({ status: res.statusCode!, raw: res.rawHeaders, headers: res.headers, body: text }))
    })
    req.on('error', reject)
    req.write(body)
    req.end()
  })
}

/** The values of `name` in a raw header list, in order. */
function values(raw: string[], name: string): string[] {
  const out: string[] = []
  for (let i = 0; i < raw.length; i += 2) if (raw[i]!.toLowerCase() === name) out.push(raw[i + 1]!)
  return out
}

const chat = (content: string, question = 'q') => JSON.stringify({ model: 'stub', messages: [{ role: 'system', content }, { role: 'user', content: question }] })
const UUID = /^[0-9a-f]{8}-[0-9a-f]{4}-4[0-9a-f]{3}-[89ab][0-9a-f]{3}-[0-9a-f]{12}$/

describe('node-proxy headers level', () => {
  let url = ''
  beforeAll(async () => {
    url = await proxy('headers')
  })

  it('forwards end-to-end headers each way, repeated ones kept, and drops hop-by-hop ones', async () => {
    const sent = seen.length
    const body = chat('hello')
    const a = await send(
      url,
      '/v1/chat/completions',
      ['Host', 'front.example:8080', 'Content-Type', 'application/json', 'X-E2e', 'a', 'X-E2e', 'b', 'Connection', 'keep-alive, X-Hop', 'X-Hop', '1', 'Keep-Alive', 'timeout=9', 'Proxy-Connection', 'keep-alive', 'TE', 'trailers', 'Trailer', 'x-t', 'Upgrade', 'h2c', 'X-Forwarded-For', '10.1.1.1', 'X-Request-Id', 'client-id-1'],
      body,
    )
    expect(a.status).toBe(200)
    expect(a.body).toBe('{"ok":true}')
    expect(seen.length).toBe(sent + 1)
    const up = seen.at(-1)!
    expect(up.body.toString()).toBe(body)
    expect(values(up.raw, 'x-e2e')).toEqual(['a', 'b'])
    expect(values(up.raw, 'content-type')).toEqual(['application/json'])
    for (const hop of ['x-hop', 'keep-alive', 'proxy-connection', 'te', 'trailer', 'upgrade', 'transfer-encoding']) expect(values(up.raw, hop), hop).toEqual([])
    // The Host the client sent names the proxy; the upstream's is its own.
    expect(values(up.raw, 'host')).toEqual([new URL(upstreamUrl).host])
    expect(values(up.raw, 'x-forwarded-host')).toEqual(['front.example:8080'])
    expect(values(up.raw, 'x-forwarded-for')).toEqual(['10.1.1.1, 127.0.0.1'])
    expect(values(up.raw, 'x-forwarded-proto')).toEqual(['http'])
    expect(values(up.raw, 'x-request-id')).toEqual(['client-id-1'])

    expect(values(a.raw, 'x-up')).toEqual(['1', '2'])
    expect(values(a.raw, 'set-cookie')).toEqual(['a=1', 'b=2'])
    expect(values(a.raw, 'x-up-hop')).toEqual([])
    expect(values(a.raw, 'trailer')).toEqual([])
    // The client's connection is the proxy's own: Node's keep-alive, not the upstream's.
    expect(values(a.raw, 'keep-alive')).not.toContain('timeout=5')
    expect(String(a.headers.connection)).not.toContain('x-up-hop')
    // The request's id wins over the one the upstream answered with.
    expect(values(a.raw, 'x-request-id')).toEqual(['client-id-1'])
  })

  it('gives a request without a usable id a random UUID, sent upstream and answered', async () => {
    for (const ids of [[], ['X-Request-Id', 'one', 'X-Request-Id', 'two'], ['X-Request-Id', 'caf\u00e9']]) {
      const a = await send(url, '/v1/chat/completions', ['Content-Type', 'application/json', ...ids], chat('hello'))
      const id = values(a.raw, 'x-request-id')
      expect(id).toHaveLength(1)
      expect(id[0]).toMatch(UUID)
      expect(values(seen.at(-1)!.raw, 'x-request-id')).toEqual(id)
    }
  })
})

// The metrics level is the route level plus its counters: it must still route the same.
describe.each([
  ['route', 'public'],
  ['route', 'serve'],
  ['metrics', 'public'],
  ['metrics', 'serve'],
])('node-proxy %s level, PATHS=%s', (level, paths) => {
  let url = ''
  const expected = new Router({ instances: Array.from({ length: 4 }, (_, i) => ({ id: `instance-${i}` })) })
  beforeAll(async () => {
    url = await proxy(level, { PATHS: paths })
  })
  afterAll(() => expected.close())

  const post = (body: string, headers: string[] = []) => send(url, '/v1/chat/completions', ['Content-Type', 'application/json', ...headers], body)

  it("picks the library's instance for each prompt, and releases each lease", async () => {
    const picked = new Set<string>()
    for (let i = 0; i < 16; i++) {
      const body = chat(`Assistant ${i}: ${'answer from the policy. '.repeat(40)}`)
      const key = routingKey(body, { api: 'chat', ...expected.params })
      const lease = expected.pick(key.text, { tenant: key.tenant, anchor: key.anchor })
      lease.release()
      const a = await post(body)
      expect(a.status).toBe(200)
      expect(a.headers['x-node-proxy-instance']).toBe(lease.instance)
      // One request at a time: the lease of every earlier one was released.
      expect(a.headers['x-node-proxy-in-flight']).toBe('1')
      picked.add(lease.instance)
    }
    expect(picked.size).toBeGreaterThan(1)
    // Still forwarding as the headers level does.
    const a = await post(chat('x'), ['X-Request-Id', 'rid-7'])
    expect(values(a.raw, 'x-request-id')).toEqual(['rid-7'])
    expect(values(seen.at(-1)!.raw, 'x-forwarded-proto')).toEqual(['http'])
  })

  it('scopes the key by the tenant header', async () => {
    const body = chat(`tenant prompt ${'policy '.repeat(50)}`)
    const byTenant = new Set<string>()
    for (let t = 0; t < 12; t++) {
      const key = routingKey(body, { api: 'chat', ...expected.params, tenant: `tenant-${t}` })
      const lease = expected.pick(key.text, { tenant: key.tenant, anchor: key.anchor })
      lease.release()
      const a = await post(body, ['X-Amzn-SageMaker-Prefix-Aware-Id', `tenant-${t}`])
      expect(a.headers['x-node-proxy-instance']).toBe(lease.instance)
      byTenant.add(lease.instance)
    }
    expect(byTenant.size).toBeGreaterThan(1)
  })

  it('answers a body with no routing key 400 and an unknown path 404, OpenAI-shaped, leaking no lease', async () => {
    const bad = await post('{"messages":3}')
    expect(bad.status).toBe(400)
    expect(JSON.parse(bad.body)).toMatchObject({ error: { code: 'missing_messages', type: 'invalid_request_error' } })
    const none = await send(url, '/v1/nothing', ['Content-Type', 'application/json'], chat('x'))
    expect(none.status).toBe(404)
    expect(JSON.parse(none.body)).toMatchObject({ error: { code: 'unsupported_route' } })
    const a = await post(chat('after the refusals'))
    expect(a.headers['x-node-proxy-in-flight']).toBe('1')
  })

  it('releases the lease of a client that leaves before its answer, and ends the upstream request', async () => {
    // The question comes after the key's 4,096 characters: both requests below have one key.
    const system = 'Answer from the policy below. '.repeat(160)
    const body = chat(system, 'hold')
    const waiting = held.length
    await new Promise<void>((resolve, reject) => {
      const req = http.request(`${url}/v1/chat/completions`, { method: 'POST', headers: { 'content-type': 'application/json' }, agent: false })
      req.on('error', () => resolve())
      req.on('close', () => resolve())
      req.end(body)
      const poll = setInterval(() => {
        if (held.length === waiting) return
        clearInterval(poll)
        req.destroy()
      }, 5)
      req.on('response', () => reject(new Error('the held request was answered')))
    })
    // The proxy aborts the upstream request when its client leaves (and releases the lease as it does).
    await held[waiting]!.closed
    // The same prompt with the upstream answering: same instance, and only this request on it.
    const again = await post(chat(system, 'free'))
    expect(again.status).toBe(200)
    const key = routingKey(body, { api: 'chat', ...expected.params })
    const lease = expected.pick(key.text, { tenant: key.tenant, anchor: key.anchor })
    lease.release()
    expect(again.headers['x-node-proxy-instance']).toBe(lease.instance)
    expect(again.headers['x-node-proxy-in-flight']).toBe('1')
  })
})
