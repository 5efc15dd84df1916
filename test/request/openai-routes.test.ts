// The OpenAI and vLLM routes beyond chat and completions, end to end on loopback: the openai
// SDK against the project's simulated workers, and raw requests against stub instances that
// record what reached them (path, bytes) and which instance the router chose.
import OpenAI from 'openai'
import { afterEach, describe, expect, it } from 'vitest'
import type { ProxyServer } from '../../src/proxy/proxy.js'
import { startSimFleet, type SimFleet } from '../../src/sim/index.js'
import { post, startRouter, startStub, totalInFlight, useStubFleet } from '../proxy/helpers.js'

const MODEL = 'sim-tiny'
const probes = new Set(['/health', '/v1/models', '/metrics'])

describe('the openai SDK through the router, simulated workers behind it', () => {
  let fleet: SimFleet | undefined
  let router: ProxyServer | undefined
  afterEach(async () => {
    if (router) expect(totalInFlight(router)).toBe(0)
    await router?.close()
    await fleet?.close()
    router = undefined
    fleet = undefined
  })

  it('embeddings and responses, on the default and on a named endpoint, answer what the worker answers', async () => {
    fleet = await startSimFleet({ instances: 3, profile: 'tiny' })
    router = await startRouter([], { endpoints: [{ name: 'default', instances: fleet.urls }, { name: 'emb', instances: fleet.urls }] })
    const direct = new OpenAI({ baseURL: `${fleet.urls[0]}/v1`, apiKey: 'unused', maxRetries: 0 })
    const input = ['a first passage to embed', 'a second one']
    const expected = (await direct.embeddings.create({ model: MODEL, input })).data.map((d) => d.embedding)
    for (const baseURL of [`${router.url}/v1`, `${router.url}/endpoints/emb/openai/v1`]) {
      const client = new OpenAI({ baseURL, apiKey: 'unused', maxRetries: 0 })
      const emb = await client.embeddings.create({ model: MODEL, input })
      expect(emb.data.map((d) => d.embedding)).toEqual(expected)
      expect(emb.data[0]!.embedding).toHaveLength(8)
      const floats = await client.embeddings.create({ model: MODEL, input: input[0]!, encoding_format: 'float' })
      expect(floats.data[0]!.embedding).toEqual(expected[0])

      const r = await client.responses.create({ model: MODEL, instructions: 'Answer briefly.', input: 'What is a prefix cache?', max_output_tokens: 5 })
      expect(r.status).toBe('completed')
      expect(r.output_text).toBe('Lorem ipsum dolor si') // five of the simulator's four-byte tokens
      expect(r.usage?.output_tokens).toBe(5)
    }
    // The router's model rules hold for the new routes: a model no worker serves is refused by the router itself.
    const client = new OpenAI({ baseURL: `${router.url}/v1`, apiKey: 'unused', maxRetries: 0 })
    await expect(client.embeddings.create({ model: 'not-served', input: 'x' })).rejects.toMatchObject({ status: 404, code: 'model_not_found' })
  })
})

describe('routing keys and forwarding, stub instances behind the router', () => {
  const ctx = useStubFleet()
  const instanceOf = async (path: string, body: unknown, headers: Record<string, string> = {}) => {
    const r = await post(`${ctx.router!.url}${path}`, JSON.stringify(body), headers)
    expect(r.status, `${path} ${r.text}`).toBe(200)
    return r.headers.get('x-prefix-router-instance')
  }

  it('each API lands where the same prompt lands on /v1/completions or /v1/chat/completions', async () => {
    await ctx.fleet(4)
    const used = new Set<string | null>()
    for (let i = 0; i < 24; i++) {
      const text = `document ${i}: ${'a shared opening of some length. '.repeat(3)}${i}`
      const viaCompletions = await instanceOf('/v1/completions', { model: 'm', prompt: text, max_tokens: 3 })
      used.add(viaCompletions)
      expect(await instanceOf('/v1/embeddings', { model: 'm', input: text })).toBe(viaCompletions)
      expect(await instanceOf('/v1/embeddings', { model: 'm', input: [text, `unrelated ${i}`], encoding_format: 'float' })).toBe(viaCompletions)
      expect(await instanceOf('/v1/rerank', { model: 'm', query: text, documents: [`doc a ${i}`, 'doc b'], top_n: 1 })).toBe(viaCompletions)
      expect(await instanceOf('/v1/score', { model: 'm', text_1: text, text_2: [`doc ${i}`] })).toBe(viaCompletions)
      expect(await instanceOf('/tokenize', { model: 'm', prompt: text })).toBe(viaCompletions)

      const messages = [{ role: 'system', content: text }, { role: 'user', content: `question ${i}` }]
      const viaChat = await instanceOf('/v1/chat/completions', { model: 'm', messages })
      expect(await instanceOf('/v1/responses', { model: 'm', instructions: text, input: `question ${i}`, temperature: 0.3 })).toBe(viaChat)
      expect(await instanceOf('/v1/responses', { model: 'm', input: [...messages, { type: 'reasoning', summary: [] }] })).toBe(viaChat)
      expect(await instanceOf('/tokenize', { model: 'm', messages })).toBe(viaChat)

      const ids = [i, 100 + i, 200 + i, 300 + i]
      const viaIds = await instanceOf('/v1/completions', { model: 'm', prompt: ids })
      expect(await instanceOf('/detokenize', { model: 'm', tokens: ids })).toBe(viaIds)
      expect(await instanceOf('/v1/embeddings', { model: 'm', input: ids })).toBe(viaIds)
    }
    // The 24 prompts spread over the fleet, so agreeing with completions says something.
    expect(used.size).toBeGreaterThan(1)
  })

  it('prompt_cache_key and the tenant header scope the key on the new routes as on chat', async () => {
    await ctx.fleet(4)
    const used = new Set<string | null>()
    for (let t = 0; t < 16; t++) {
      const viaCompletions = await instanceOf('/v1/completions', { model: 'm', prompt: 'one shared system prompt', prompt_cache_key: `tenant-${t}` })
      used.add(viaCompletions)
      expect(await instanceOf('/v1/embeddings', { model: 'm', input: 'one shared system prompt', prompt_cache_key: `tenant-${t}` })).toBe(viaCompletions)
      expect(await instanceOf('/v1/rerank', { model: 'm', query: 'one shared system prompt', documents: ['d'] }, { 'x-amzn-sagemaker-prefix-aware-id': `tenant-${t}` })).toBe(viaCompletions)
    }
    expect(used.size).toBeGreaterThan(1)
  })

  it('forwards the body byte for byte, and a bearer token, to the same path on the instance, from the default and a named endpoint', async () => {
    await ctx.fleet(1)
    const stub = ctx.stubs[0]!
    ctx.router = await startRouter([], { endpoints: [{ name: 'default', instances: [stub.url] }, { name: 'pool', instances: [stub.url] }] })
    const bodies: Record<string, string> = {
      '/v1/embeddings': '{ "input" : "x\\u00e9" ,"model":"m",  "dimensions": 3 }',
      '/v1/responses': '{"input":[{"role":"user","content":"hi"}],\n "model":"m","store":false}',
      '/v1/rerank': '{"query":"q","documents":["a","b"] , "top_n":1}',
      '/v1/score': '{"text_1":"q","text_2":"a"}',
      '/tokenize': '{"prompt":"p","add_special_tokens":false}',
      '/detokenize': '{"tokens":[1,2, 3]}',
    }
    for (const [path, body] of Object.entries(bodies)) {
      for (const front of [path, `/endpoints/pool/openai${path}`]) {
        const before = stub.seen.length
        const r = await post(`${ctx.router.url}${front}?trace=1`, body, { authorization: 'Bearer sk-for-vllm' })
        expect(r.status, front).toBe(200)
        const got = stub.seen.slice(before).filter((s) => !probes.has(s.url))
        expect(got.map((s) => [s.method, s.url]), front).toEqual([['POST', `${path}?trace=1`]])
        expect(got[0]!.body.toString('utf8')).toBe(body)
        // vLLM's --api-key: a bearer token is the instance's to check, unlike a SigV4 signature.
        expect(got[0]!.headers.authorization).toBe('Bearer sk-for-vllm')
      }
    }
  })

  it('routes a model to the instances serving it and refuses one served nowhere', async () => {
    await ctx.fleet(2)
    const [a, b] = ctx.stubs
    ctx.router = await startRouter([], { endpoints: [{ name: 'default', instances: [{ url: a!.url, models: ['embedder'] }, { url: b!.url, models: ['reranker'] }] }] })
    for (let i = 0; i < 8; i++) {
      expect(await instanceOf('/v1/embeddings', { model: 'embedder', input: `text ${i}` })).toBe(a!.url)
      expect(await instanceOf('/v1/rerank', { model: 'reranker', query: `query ${i}`, documents: ['d'] })).toBe(b!.url)
    }
    const r = await post(`${ctx.router.url}/v1/score`, JSON.stringify({ model: 'nowhere', text_1: 'q', text_2: 'd' }))
    expect(r.status).toBe(404)
    expect(JSON.parse(r.text).error.code).toBe('model_not_found')
  })

  it('a try answered 503 is retried on another instance, on every new route', async () => {
    // Passes its health checks, fails every request.
    const bad = await startStub('bad', (req, res) => {
      if (req.method === 'GET') {
        res.writeHead(req.url === '/health' ? 200 : 404)
        return res.end()
      }
      res.writeHead(503, { 'content-type': 'application/json' })
      res.end('{"error":{"message":"overloaded","type":"ServiceUnavailableError","code":503}}')
    })
    await ctx.fleet(1, { outlier: { consecutive5xx: 0, consecutiveGatewayFailure: 0 } })
    const good = ctx.stubs[0]!
    ctx.stubs.push(bad)
    await ctx.router!.close()
    ctx.router = await startRouter([good.url, bad.url], { outlier: { consecutive5xx: 0, consecutiveGatewayFailure: 0 } })
    const cases: [string, (i: number) => unknown][] = [
      ['/v1/embeddings', (i) => ({ input: `t${i}` })],
      ['/v1/responses', (i) => ({ input: `t${i}` })],
      ['/v1/rerank', (i) => ({ query: `t${i}`, documents: ['d'] })],
      ['/v1/score', (i) => ({ text_1: `t${i}`, text_2: 'd' })],
      ['/tokenize', (i) => ({ prompt: `t${i}` })],
      ['/detokenize', (i) => ({ tokens: [i] })],
    ]
    let retried = 0
    for (const [path, body] of cases) {
      for (let i = 0; i < 8; i++) {
        const r = await post(`${ctx.router.url}${path}`, JSON.stringify(body(i)))
        expect(r.status, `${path} ${r.text}`).toBe(200)
        expect(r.headers.get('x-prefix-router-instance')).toBe(good.url)
        retried += Number(r.headers.get('x-prefix-router-retries'))
      }
    }
    // 48 requests on a two-instance ring: the bad one is some of their first choices.
    expect(retried).toBeGreaterThan(0)
  })

  it('refuses unknown /v1/ paths with a 404 that lists the routes, and bad bodies with their code', async () => {
    await ctx.fleet(1)
    for (const path of ['/v1/audio/transcriptions', '/v1/load_lora_adapter', '/endpoints/default/openai/v1/classify']) {
      const r = await post(`${ctx.router!.url}${path}`, '{}')
      expect(r.status, path).toBe(404)
      const e = JSON.parse(r.text).error
      expect(e).toMatchObject({ type: 'invalid_request_error', code: 'unsupported_route' })
      for (const listed of ['POST /v1/chat/completions', 'POST /v1/embeddings', 'POST /v1/responses', 'POST /v1/rerank', 'POST /v1/score', 'POST /tokenize', 'POST /detokenize', 'GET /v1/models']) {
        expect(e.message).toContain(listed)
      }
    }
    const get = await fetch(`${ctx.router!.url}/v1/embeddings`)
    expect(get.status).toBe(405)
    expect(get.headers.get('allow')).toBe('POST')
    // An unknown path is a 404 whatever the method: no Allow names a route that is not there.
    const unknown = await fetch(`${ctx.router!.url}/v1/audio/speech`)
    expect(unknown.status).toBe(404)
    expect(JSON.parse(await unknown.text()).error.code).toBe('unsupported_route')
    const cases: [string, string, string][] = [
      ['/v1/embeddings', '{"model":"m"}', 'missing_input'],
      ['/v1/responses', '{"input":42}', 'invalid_input'],
      ['/v1/rerank', '{"documents":["a"]}', 'missing_query'],
      ['/v1/score', '{"text_1":', 'invalid_json'],
      ['/tokenize', '{}', 'missing_prompt'],
      ['/detokenize', '{"tokens":"1 2"}', 'missing_tokens'],
      ['/endpoints/default/openai/detokenize', '[]', 'invalid_body'],
    ]
    for (const [path, body, code] of cases) {
      const r = await post(`${ctx.router!.url}${path}`, body)
      expect(r.status, path).toBe(400)
      expect(JSON.parse(r.text).error.code, path).toBe(code)
    }
    // None of them reached the instance.
    expect(ctx.stubs[0]!.seen.filter((s) => !probes.has(s.url))).toEqual([])
  })
})
