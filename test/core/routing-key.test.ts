// routingKey is the key serve routes by: a gateway that computes it for a body and picks with
// its own Router (same instances, same parameters) lands where serve sends that body, for every
// API serve reads. The live router's debug header says where serve sent each request.
import { afterAll, beforeAll, describe, expect, it } from 'vitest'
import { RequestError, Router, routingKey, TENANT_HEADER, type RoutingApi } from '../../src/index.js'
import type { ProxyServer } from '../../src/proxy/proxy.js'
import { releaseHeld, startRouter, startStub, type Stub } from '../proxy/helpers.js'

const system = 'You are a meticulous assistant for the ACME support desk. '.repeat(110)

interface Case {
  name: string
  path: string
  api: RoutingApi
  body: string
  tenant?: string
}

const cases: Case[] = [
  ...Array.from({ length: 6 }, (_, i): Case => ({
    name: `chat ${i}`,
    path: '/v1/chat/completions',
    api: 'chat',
    body: JSON.stringify({ model: 'm', messages: [{ role: 'system', content: `${i}: ${system}` }, { role: 'user', content: `question ${i}` }] }),
  })),
  { name: 'chat, a later turn', path: '/v1/chat/completions', api: 'chat', body: JSON.stringify({ model: 'm', messages: [{ role: 'system', content: `0: ${system}` }, { role: 'user', content: 'question 0' }, { role: 'assistant', content: 'a' }, { role: 'user', content: 'more' }] }) },
  // Short conversations a few turns in: longest_prefix places them by their opening (the anchor).
  ...Array.from({ length: 6 }, (_, i): Case => ({
    name: `chat turn 2, conversation ${i}`,
    path: '/v1/chat/completions',
    api: 'chat',
    body: JSON.stringify({ messages: [{ role: 'system', content: 'Be brief.' }, { role: 'user', content: `topic ${i}` }, { role: 'assistant', content: 'ok' }, { role: 'user', content: `more on ${i}` }] }),
  })),
  ...Array.from({ length: 6 }, (_, i): Case => ({ name: `chat, tenant header t${i}`, path: '/v1/chat/completions', api: 'chat', body: JSON.stringify({ messages: [{ role: 'user', content: 'hello' }] }), tenant: `t${i}` })),
  ...Array.from({ length: 6 }, (_, i): Case => ({ name: `chat, prompt_cache_key k${i}`, path: '/v1/chat/completions', api: 'chat', body: JSON.stringify({ messages: [{ role: 'user', content: 'hello' }], prompt_cache_key: `k${i}` }) })),
  { name: 'completions', path: '/v1/completions', api: 'completions', body: JSON.stringify({ model: 'm', prompt: `Once upon a time ${system}` }) },
  { name: 'completions, token ids', path: '/v1/completions', api: 'completions', body: JSON.stringify({ prompt: [1, 2, 3, 4, 5] }) },
  { name: 'embeddings', path: '/v1/embeddings', api: 'embeddings', body: JSON.stringify({ input: ['embed me', 'and me'] }) },
  { name: 'responses', path: '/v1/responses', api: 'responses', body: JSON.stringify({ instructions: 'Be brief.', input: 'What is a KV cache?' }) },
  { name: 'rerank', path: '/v1/rerank', api: 'rerank', body: JSON.stringify({ query: 'best pizza', documents: ['a', 'b'] }) },
  { name: 'score', path: '/v1/score', api: 'score', body: JSON.stringify({ text_1: 'query text', text_2: ['x', 'y'] }) },
  { name: 'tokenize', path: '/tokenize', api: 'tokenize', body: JSON.stringify({ prompt: 'count my tokens' }) },
  { name: 'detokenize', path: '/detokenize', api: 'detokenize', body: JSON.stringify({ tokens: [11, 12, 13] }) },
  { name: 'invoke', path: '/invocations', api: 'invoke', body: `raw bytes ${system}` },
  ...Array.from({ length: 6 }, (_, i): Case => ({ name: `invoke, tenant header t${i}`, path: '/invocations', api: 'invoke', body: `raw bytes ${system}`, tenant: `t${i}` })),
]

async function send(url: string, c: Case): Promise<string> {
  const r = await fetch(`${url}${c.path}`, { method: 'POST', body: c.body, headers: { 'content-type': 'application/json', ...(c.tenant !== undefined && { [TENANT_HEADER]: c.tenant }) } })
  await r.text()
  expect(r.status, c.name).toBe(200)
  return r.headers.get('x-prefix-router-instance')!
}

describe.each([
  { strategy: 'prefix_aware', prefixLength: 1024 },
  // longest_prefix reads past prefixLength (matchLength) and places by the chat's opening (anchor).
  { strategy: 'longest_prefix', prefixLength: 1024, placement: 'hash' as const },
])('routingKey against serve ($strategy)', (routing) => {
  let stubs: Stub[] = []
  let proxy: ProxyServer
  let gateway: Router

  beforeAll(async () => {
    stubs = await Promise.all(Array.from({ length: 6 }, (_, i) => startStub(`s${i}`)))
    proxy = await startRouter(stubs.map((s) => s.url), { routing })
    gateway = new Router({ ...routing, instances: stubs.map((s) => ({ id: s.url })) })
  })

  afterAll(async () => {
    gateway?.close()
    releaseHeld(stubs)
    await proxy?.close()
    await Promise.all(stubs.map((s) => s.close()))
  })

  it('a gateway picking with routingKey lands where serve sent the same body', async () => {
    const spread = new Set<string>()
    for (const c of cases) {
      const live = await send(proxy.url, c)
      const k = routingKey(c.body, { api: c.api, ...gateway.params, tenant: c.tenant })
      const lease = gateway.pick(k.text ?? k.bytes, { tenant: k.tenant, anchor: k.anchor })
      lease.release()
      expect(lease.instance, c.name).toBe(live)
      spread.add(live)
    }
    // Not one instance for everything, or agreement would prove nothing.
    expect(spread.size).toBeGreaterThan(2)
  })
})

describe('routingKey', () => {
  it('gives text for OpenAI bodies, the first prefixLength bytes for invoke, and the effective tenant', () => {
    const chat = routingKey(JSON.stringify({ model: 'm', messages: [{ role: 'user', content: 'hi' }], prompt_cache_key: 'k', stream: true }), { api: 'chat', prefixLength: 1024 })
    expect(chat).toMatchObject({ tenant: 'k', model: 'm', stream: true })
    expect(chat.text).toContain('hi')
    expect(chat.anchor).toBe(chat.text.length)
    // The header wins over prompt_cache_key, as in serve.
    expect(routingKey(JSON.stringify({ prompt: 'p', prompt_cache_key: 'k' }), { api: 'completions', prefixLength: 1024, tenant: 'h' }).tenant).toBe('h')
    const inv = routingKey(Buffer.alloc(5000, 1), { api: 'invoke', prefixLength: 4096, promptCacheKey: 'k' })
    expect(inv.bytes.length).toBe(4096)
    expect(inv).toMatchObject({ tenant: 'k', anchor: undefined })
  })

  it('keeps as much text as the strategy reads: longest_prefix matches up to matchLength, past prefixLength', () => {
    const body = JSON.stringify({ prompt: 'x'.repeat(200_000) })
    // Cut at twice the span in UTF-16 units (always at least span code points), as serve cuts it.
    expect(routingKey(body, { api: 'completions', prefixLength: 1024, strategy: 'prefix_aware' }).text.length).toBe(2048)
    expect(routingKey(body, { api: 'completions', prefixLength: 1024, strategy: 'longest_prefix', matchLength: 4096 }).text.length).toBe(8192)
    expect(routingKey(body, { api: 'completions', prefixLength: 1024, strategy: 'longest_prefix' }).text.length).toBe(2 * 65536)
  })

  it('refuses what serve refuses, with the same code', () => {
    const refused = (f: () => unknown) => {
      try {
        f()
      } catch (err) {
        expect(err).toBeInstanceOf(RequestError)
        return `${(err as RequestError).status} ${(err as RequestError).code}`
      }
      return 'accepted'
    }
    expect(refused(() => routingKey('{', { api: 'chat', prefixLength: 1024 }))).toBe('400 invalid_json')
    expect(refused(() => routingKey('{"messages":[]}', { api: 'chat', prefixLength: 1024 }))).toBe('400 missing_messages')
    expect(refused(() => routingKey('x', { api: 'invoke', prefixLength: 1024, tenant: '\u0001' }))).toBe('400 invalid_tenant')
    expect(() => routingKey('x', { api: 'grpc' as RoutingApi, prefixLength: 1024 })).toThrow(RangeError)
    expect(() => routingKey('x', { api: 'invoke', prefixLength: 10 })).toThrow(/prefixLength must be an integer from 1024 to 65536/)
  })
})
