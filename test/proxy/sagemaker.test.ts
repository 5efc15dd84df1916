// Code written against SageMaker, pointed at the router: the AWS SDK's SageMaker runtime
// client (dummy credentials, `endpoint` = the router) invoking the project's simulated vLLM
// workers, and stub instances where a test needs to see exactly what reached the instance.
import type http from 'node:http'
import {
  InvokeEndpointCommand,
  InvokeEndpointWithResponseStreamCommand,
  SageMakerRuntimeClient,
  type ResponseStream,
} from '@aws-sdk/client-sagemaker-runtime'
import { afterEach, describe, expect, it } from 'vitest'
import type { ProxyServer } from '../../src/proxy/proxy.js'
import { startSimFleet, type SimFleet } from '../../src/sim/index.js'
import { startRouter, startStub, totalInFlight, type Stub } from './helpers.js'

const credentials = { accessKeyId: 'AKIDEXAMPLE', secretAccessKey: 'not-a-secret', sessionToken: 'session-token-value' }

let fleet: SimFleet | undefined
let router: ProxyServer | undefined
let stubs: Stub[] = []
const clients: SageMakerRuntimeClient[] = []
afterEach(async () => {
  for (const c of clients.splice(0)) c.destroy()
  if (router) expect(totalInFlight(router)).toBe(0)
  await router?.close()
  await fleet?.close()
  await Promise.all(stubs.map((s) => s.close()))
  router = undefined
  fleet = undefined
  stubs = []
})

/** A client for the router, and the instance (debug header) that answered each of its requests. */
function sagemaker(url: string): { client: SageMakerRuntimeClient; answeredBy: string[] } {
  const client = new SageMakerRuntimeClient({ endpoint: url, region: 'us-east-1', credentials, maxAttempts: 1 })
  const answeredBy: string[] = []
  client.middlewareStack.add(
    (next) => async (args) => {
      const out = await next(args)
      answeredBy.push(String((out.response as { headers: Record<string, string> }).headers['x-prefix-router-instance']))
      return out
    },
    { step: 'deserialize', name: 'recordInstance' },
  )
  clients.push(client)
  return { client, answeredBy }
}

/** Every PayloadPart's bytes, in order, until the stream ends (or throws its error event). */
async function payloadParts(body: AsyncIterable<ResponseStream> | undefined): Promise<Buffer[]> {
  const parts: Buffer[] = []
  for await (const event of body ?? []) {
    expect(event.PayloadPart?.Bytes).toBeDefined()
    parts.push(Buffer.from(event.PayloadPart!.Bytes!))
  }
  return parts
}

/** The content deltas of a chat SSE stream, and whether it ended with [DONE]. */
function sseContent(text: string): { content: string; done: boolean } {
  let content = ''
  let done = false
  for (const line of text.split('\n')) {
    if (!line.startsWith('data: ')) continue
    if (line === 'data: [DONE]') done = true
    else content += JSON.parse(line.slice(6)).choices[0]?.delta?.content ?? ''
  }
  return { content, done }
}

const chatBody = (system: string, extra: Record<string, unknown> = {}) =>
  JSON.stringify({ messages: [{ role: 'system', content: system }, { role: 'user', content: 'Summarise.' }], max_tokens: 6, ...extra })

describe('SageMaker runtime SDK against the router and simulated workers', () => {
  it('InvokeEndpoint and InvokeEndpointWithResponseStream answer what the worker answers', async () => {
    fleet = await startSimFleet({ instances: 3, profile: 'tiny' })
    router = await startRouter([], { endpoints: [{ name: 'default', instances: fleet.urls }, { name: 'my-llm-endpoint', instances: fleet.urls }] })
    const { client } = sagemaker(router.url)

    const whole = await client.send(new InvokeEndpointCommand({ EndpointName: 'my-llm-endpoint', ContentType: 'application/json', Body: chatBody('a system prompt'), PrefixAwareId: 'tenant-a' }))
    expect(whole.InvokedProductionVariant).toBe('AllTraffic')
    expect(whole.ContentType).toBe('application/json')
    const answer = JSON.parse(Buffer.from(whole.Body).toString('utf8'))
    expect(answer.object).toBe('chat.completion')
    expect(answer.choices[0].message.content).toBe('Lorem ipsum dolor sit am') // six of the simulator's four-byte tokens

    const streamed = await client.send(
      new InvokeEndpointWithResponseStreamCommand({ EndpointName: 'my-llm-endpoint', ContentType: 'application/json', Body: chatBody('a system prompt', { stream: true }), PrefixAwareId: 'tenant-a' }),
    )
    expect(streamed.InvokedProductionVariant).toBe('AllTraffic')
    expect(streamed.ContentType).toMatch(/^text\/event-stream/)
    const parts = await payloadParts(streamed.Body)
    expect(parts.length).toBeGreaterThan(0)
    expect(sseContent(Buffer.concat(parts).toString('utf8'))).toEqual({ content: 'Lorem ipsum dolor sit am', done: true })
  })

  it('the tenant id (PrefixAwareId) scopes the routing key as it does for a raw request', async () => {
    fleet = await startSimFleet({ instances: 4, profile: 'tiny' })
    router = await startRouter([], { endpoints: [{ name: 'llm', instances: fleet.urls }] })
    const { client, answeredBy } = sagemaker(router.url)
    const body = chatBody('one system prompt every tenant shares', { max_tokens: 1 })
    const raw: string[] = []
    for (let t = 0; t < 12; t++) {
      await client.send(new InvokeEndpointCommand({ EndpointName: 'llm', ContentType: 'application/json', Body: body, PrefixAwareId: `tenant-${t}` }))
      const r = await fetch(`${router.url}/endpoints/llm/invocations`, { method: 'POST', body, headers: { 'content-type': 'application/json', 'x-amzn-sagemaker-prefix-aware-id': `tenant-${t}` } })
      await r.arrayBuffer()
      raw.push(String(r.headers.get('x-prefix-router-instance')))
    }
    expect(answeredBy).toEqual(raw)
    expect(new Set(raw).size).toBeGreaterThan(1)
    await expect(client.send(new InvokeEndpointCommand({ EndpointName: 'llm', Body: body, PrefixAwareId: 'x'.repeat(65) }))).rejects.toMatchObject({ $metadata: { httpStatusCode: 400 } })
  })

  it('a worker that fails mid-stream ends the event stream with a ModelStreamError event', async () => {
    fleet = await startSimFleet({ instances: 2, profile: 'tiny' })
    router = await startRouter([], { endpoints: [{ name: 'llm', instances: fleet.urls }] })
    for (const url of fleet.urls) {
      const r = await fetch(`${url}/sim/faults`, { method: 'POST', body: JSON.stringify({ drop_after_tokens: 3 }) })
      expect(r.status).toBe(200)
    }
    const { client } = sagemaker(router.url)
    const out = await client.send(new InvokeEndpointWithResponseStreamCommand({ EndpointName: 'llm', Body: chatBody('doomed', { max_tokens: 20, stream: true }) }))
    const parts: Buffer[] = []
    const failure = await (async () => {
      try {
        for await (const event of out.Body!) parts.push(Buffer.from(event.PayloadPart!.Bytes!))
      } catch (err) {
        return err
      }
      return undefined
    })()
    expect(failure).toMatchObject({ name: 'ModelStreamError', ErrorCode: 'StreamBroken' })
    expect((failure as Error).message).toMatch(/upstream stream ended early/)
    // What arrived before the break is the worker's stream, cut short: no [DONE].
    expect(parts.length).toBeGreaterThan(0)
    const { content, done } = sseContent(Buffer.concat(parts).toString('utf8'))
    expect(done).toBe(false)
    expect('Lorem ipsum dolor sit amet'.startsWith(content)).toBe(true)
  })
})

describe('SageMaker runtime SDK against stub instances', () => {
  it('passes the instance the bytes and the container headers, never the SigV4 credentials, and frames its chunks as sent', async () => {
    const chunks = [Buffer.from('first part|'), Buffer.from(Array.from({ length: 256 }, (_, i) => i)), Buffer.from('|last')]
    const stub = await startStub('s', (req, res, _body) => {
      if (req.method === 'GET') {
        res.writeHead(req.url === '/health' ? 200 : 404)
        return res.end()
      }
      res.writeHead(200, { 'content-type': 'application/x-custom', 'x-amzn-sagemaker-custom-attributes': 'from=instance' })
      // One write per tick, so that the router sees them as separate chunks.
      const writeNext = (i: number) => {
        if (i === chunks.length) return res.end()
        res.write(chunks[i])
        setImmediate(() => writeNext(i + 1))
      }
      writeNext(0)
    })
    stubs.push(stub)
    router = await startRouter([stub.url], { endpoints: [{ name: 'ep', instances: [stub.url] }] })
    const { client } = sagemaker(router.url)
    const payload = Buffer.from([0, 1, 2, 250, 251, 252, 0x7b])

    const whole = await client.send(
      new InvokeEndpointCommand({ EndpointName: 'ep', ContentType: 'application/octet-stream', Body: payload, TargetModel: 'model-a.tar.gz', CustomAttributes: 'trace=on', PrefixAwareId: 'tenant-9' }),
    )
    expect(Buffer.from(whole.Body)).toEqual(Buffer.concat(chunks))
    expect(whole.CustomAttributes).toBe('from=instance')
    const streamed = await client.send(new InvokeEndpointWithResponseStreamCommand({ EndpointName: 'ep', Body: payload, CustomAttributes: 'trace=on' }))
    expect(streamed.ContentType).toBe('application/x-custom')
    expect(streamed.CustomAttributes).toBe('from=instance')
    const parts = await payloadParts(streamed.Body)
    expect(Buffer.concat(parts)).toEqual(Buffer.concat(chunks))
    expect(parts.every((p) => p.length > 0)).toBe(true)

    const seen = stub.seen.filter((s) => s.method === 'POST')
    expect(seen.map((s) => s.url)).toEqual(['/invocations', '/invocations'])
    for (const s of seen) expect(s.body).toEqual(payload)
    const h: http.IncomingHttpHeaders = seen[0]!.headers
    expect(h['x-amzn-sagemaker-target-model']).toBe('model-a.tar.gz')
    expect(h['x-amzn-sagemaker-custom-attributes']).toBe('trace=on')
    expect(h['x-amzn-sagemaker-prefix-aware-id']).toBe('tenant-9')
    expect(h['content-type']).toBe('application/octet-stream')
    for (const s of seen) {
      expect(s.headers.authorization).toBeUndefined()
      expect(s.headers['x-amz-security-token']).toBeUndefined()
    }
  })

  it('an inference component picks the instances hosting it; an unknown or malformed one is refused', async () => {
    const answer = (name: string) => (req: http.IncomingMessage, res: http.ServerResponse) => {
      if (req.method === 'GET') {
        res.writeHead(req.url === '/health' ? 200 : 404)
        return res.end()
      }
      res.writeHead(200, { 'content-type': 'application/json' })
      res.end(JSON.stringify({ from: name }))
    }
    stubs = [await startStub('a', answer('a')), await startStub('b', answer('b')), await startStub('c', answer('c'))]
    const [a, b, c] = stubs
    router = await startRouter([], { endpoints: [{ name: 'shared', instances: [{ url: a!.url, models: ['summariser'] }, { url: b!.url, models: ['classifier'] }, { url: c!.url, models: ['classifier'] }] }] })
    const { client } = sagemaker(router.url)
    const from = (out: { Body?: Uint8Array }) => JSON.parse(Buffer.from(out.Body!).toString('utf8')).from as string
    const classified = new Set<string>()
    for (let i = 0; i < 12; i++) {
      const body = `document ${i} `.repeat(4)
      expect(from(await client.send(new InvokeEndpointCommand({ EndpointName: 'shared', Body: body, InferenceComponentName: 'summariser' })))).toBe('a')
      classified.add(from(await client.send(new InvokeEndpointCommand({ EndpointName: 'shared', Body: body, InferenceComponentName: 'classifier' }))))
      const parts = await payloadParts((await client.send(new InvokeEndpointWithResponseStreamCommand({ EndpointName: 'shared', Body: body, InferenceComponentName: 'summariser' }))).Body)
      expect(JSON.parse(Buffer.concat(parts).toString('utf8')).from).toBe('a')
    }
    expect([...classified].sort()).toEqual(['b', 'c'])
    await expect(client.send(new InvokeEndpointCommand({ EndpointName: 'shared', Body: 'x', InferenceComponentName: 'translator' }))).rejects.toMatchObject({ $metadata: { httpStatusCode: 404 } })
    await expect(client.send(new InvokeEndpointCommand({ EndpointName: 'shared', Body: 'x', InferenceComponentName: 'bad_name' }))).rejects.toMatchObject({ $metadata: { httpStatusCode: 400 } })
    await expect(client.send(new InvokeEndpointCommand({ EndpointName: 'no-such-endpoint', Body: 'x' }))).rejects.toMatchObject({ $metadata: { httpStatusCode: 404 } })
    const r = await fetch(`${router.url}/endpoints/shared/invocations-response-stream`, { method: 'POST', body: 'x', headers: { 'x-amzn-sagemaker-inference-component': 'translator' } })
    expect(r.status).toBe(404)
    // The router's own answer to an invocation names the variant, as the instances' do.
    expect(r.headers.get('x-amzn-invoked-production-variant')).toBe('AllTraffic')
    expect(r.headers.get('x-request-id')).toMatch(/^[0-9a-f-]{36}$/)
    expect(((await r.json()) as { error: { code: string } }).error.code).toBe('model_not_found')
  })

  it('a 503 before the stream starts is retried on another instance; an error answer passes through unframed', async () => {
    const failing = (status: number) => (req: http.IncomingMessage, res: http.ServerResponse) => {
      if (req.method === 'GET') {
        res.writeHead(req.url === '/health' ? 200 : 404)
        return res.end()
      }
      res.writeHead(status, { 'content-type': 'application/json' })
      res.end(JSON.stringify({ error: { message: `answered ${status}`, type: 'BadRequestError', code: status } }))
    }
    stubs = [await startStub('good'), await startStub('busy', failing(503))]
    router = await startRouter(stubs.map((s) => s.url), { outlier: { consecutive5xx: 0, consecutiveGatewayFailure: 0 } })
    const { client, answeredBy } = sagemaker(router.url)
    for (let i = 0; i < 16; i++) {
      const out = await client.send(new InvokeEndpointWithResponseStreamCommand({ EndpointName: 'default', Body: `request ${i}` }))
      expect(JSON.parse(Buffer.concat(await payloadParts(out.Body)).toString('utf8')).stub).toBe('good')
    }
    expect(new Set(answeredBy)).toEqual(new Set([stubs[0]!.url]))
    expect(stubs[1]!.seen.filter((s) => s.method === 'POST').length).toBeGreaterThan(0)

    const bad = await startStub('bad', failing(400))
    stubs.push(bad)
    await router.close()
    router = await startRouter([bad.url])
    const r = await fetch(`${router.url}/endpoints/default/invocations-response-stream`, { method: 'POST', body: '{}' })
    expect(r.status).toBe(400)
    expect(r.headers.get('content-type')).toBe('application/json')
    expect(r.headers.get('x-amzn-invoked-production-variant')).toBe('AllTraffic')
    expect(r.headers.get('x-request-id')).toMatch(/^[0-9a-f-]{36}$/)
    // Only invocations name one: a chat request's answer, from the same instance, does not.
    const chat = await fetch(`${router.url}/v1/chat/completions`, { method: 'POST', body: '{"model":"m","messages":[{"role":"user","content":"hi"}]}', headers: { 'content-type': 'application/json' } })
    expect(chat.status).toBe(400)
    expect(chat.headers.get('x-amzn-invoked-production-variant')).toBeNull()
    expect(chat.headers.get('x-request-id')).toMatch(/^[0-9a-f-]{36}$/)
    expect(((await r.json()) as { error: { message: string } }).error.message).toBe('answered 400')
  })

  it('an invocation declared at most 64 KiB is read whole and retried after a 503; a longer one is streamed and not retried', async () => {
    const failing = (req: http.IncomingMessage, res: http.ServerResponse) => {
      if (req.method === 'GET') {
        res.writeHead(req.url === '/health' ? 200 : 404)
        return res.end()
      }
      res.writeHead(503, { 'content-type': 'application/json' })
      res.end('{"error":{"message":"busy"}}')
    }
    stubs = [await startStub('good'), await startStub('busy', failing)]
    router = await startRouter(stubs.map((s) => s.url), { outlier: { consecutive5xx: 0, consecutiveGatewayFailure: 0 } })
    // Past the 4096-byte routing prefix, so the key is read before the body ends.
    const body = (n: number, i: number) => Buffer.alloc(n, `invocation ${i} `)
    for (let i = 0; i < 12; i++) {
      const b = body(20 * 1024, i)
      const r = await fetch(`${router.url}/invocations`, { method: 'POST', body: b, headers: { 'content-type': 'application/octet-stream' } })
      expect(r.status).toBe(200)
      await r.arrayBuffer()
    }
    const good = stubs[0]!.seen.filter((s) => s.method === 'POST')
    expect(good).toHaveLength(12)
    for (const [i, s] of good.entries()) expect(s.body.equals(body(20 * 1024, i))).toBe(true)
    const busyBefore = stubs[1]!.seen.filter((s) => s.method === 'POST').length
    expect(busyBefore).toBeGreaterThan(0)

    // Over 64 KiB: streamed, so a 503 from the instance picked is the client's answer.
    const statuses: number[] = []
    for (let i = 0; i < 12; i++) {
      const r = await fetch(`${router.url}/invocations`, { method: 'POST', body: body(100 * 1024, i), headers: { 'content-type': 'application/octet-stream' } })
      statuses.push(r.status)
      await r.arrayBuffer()
    }
    const busyAfter = stubs[1]!.seen.filter((s) => s.method === 'POST').length
    expect(busyAfter).toBeGreaterThan(busyBefore)
    expect(statuses.filter((s) => s === 503)).toHaveLength(busyAfter - busyBefore)
    expect(statuses.filter((s) => s === 200)).toHaveLength(12 - (busyAfter - busyBefore))
  })
})
