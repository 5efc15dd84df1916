// The remote tokenizer against live simulator workers (their /tokenize is the engine's own
// path) and against servers that fail in each way it must survive.
import http from 'node:http'
import net from 'node:net'
import { afterEach, describe, expect, it } from 'vitest'
import { remoteTokenizer, type RequestTokenizer } from '../../src/tokens/index.js'
import { requestBody } from '../../src/tokens/remote.js'
import { maxTokenIds } from '../../src/tokens/tokenize-answer.js'
import { fleet, post } from '../sim/helpers.js'
import { cases } from './cases.js'

const open: RequestTokenizer[] = []
const servers: http.Server[] = []
afterEach(async () => {
  await Promise.all(open.splice(0).map((t) => t.close()))
  await Promise.all(
    servers.splice(0).map((s) => {
      s.closeAllConnections() // the hanging server's socket, if the client left it open
      return new Promise((r) => s.close(r))
    }),
  )
})

function remote(o: Parameters<typeof remoteTokenizer>[0] = {}): RequestTokenizer {
  const t = remoteTokenizer({ timeoutMs: 5000, ...o })
  open.push(t)
  return t
}

async function server(handler: http.RequestListener): Promise<string> {
  const s = http.createServer(handler)
  servers.push(s)
  await new Promise<void>((r) => s.listen(0, '127.0.0.1', r))
  return `http://127.0.0.1:${(s.address() as net.AddressInfo).port}`
}

describe('remoteTokenizer against the simulator', () => {
  for (const tokenizer of ['bytes', 'o200k'] as const) {
    it(`returns the sim's /tokenize ids and the engine's prompt length (${tokenizer})`, async () => {
      const { urls } = await fleet({ model: 'sim-model', tokenizer })
      const t = remote()
      for (const c of cases('sim-model')) {
        const ids = await t.tokens(c.input, urls[0])
        expect(ids, c.name).toBeInstanceOf(Uint32Array)
        const direct = await post(urls[0]!, '/tokenize', c.body)
        expect(direct.status, c.name).toBe(200)
        expect(Array.from(ids!), c.name).toEqual(direct.body.tokens)
        expect(direct.body.count).toBe(ids!.length)
        // The engine prefills as many tokens as /tokenize says.
        const gen = await post(urls[0]!, c.input.kind === 'chat' ? '/v1/chat/completions' : '/v1/completions', { ...c.body, max_tokens: 1 })
        expect(gen.body.usage.prompt_tokens, c.name).toBe(ids!.length)
      }
      expect(t.stats().failures).toBe(0)
    })
  }

  it('multi-byte text under bytes is its UTF-8, 4 bytes a token', async () => {
    const { urls } = await fleet({ model: 'sim-model' })
    const text = '🎉日本'
    const ids = await remote().tokens({ kind: 'completion', model: 'sim-model', prompt: text }, urls[0])
    const utf8 = Buffer.from(text, 'utf8') // 4 + 3 + 3 bytes: the last token is 2 bytes, zero-padded
    const padded = Buffer.concat([utf8, Buffer.alloc(2)])
    expect(Array.from(ids!)).toEqual([0, 1, 2].map((i) => padded.readUInt32LE(i * 4)))
  })

  it('a LoRA adapter name is accepted; an unknown model fails and is counted', async () => {
    const { urls } = await fleet({ model: 'base', loras: ['ad1=/x'] })
    const t = remote()
    const msgs = [{ role: 'user', content: 'same text' }]
    const base = await t.tokens({ kind: 'chat', model: 'base', messages: msgs }, urls[0])
    const lora = await t.tokens({ kind: 'chat', model: 'ad1', messages: msgs }, urls[0])
    expect(lora).toBeInstanceOf(Uint32Array)
    expect(Array.from(lora!)).toEqual(Array.from(base!))
    expect(await t.tokens({ kind: 'chat', model: 'nope', messages: msgs }, urls[0])).toBeUndefined()
    expect(t.stats().failures).toBe(1)
    expect(t.stats().lastFailure).toContain('404')
  })

  it('cache_salt and tenants do not change the tokens', async () => {
    const { urls } = await fleet({ model: 'm' })
    const msgs = [{ role: 'user', content: 'salted' }]
    const plain = await post(urls[0]!, '/tokenize', { model: 'm', messages: msgs })
    const salted = await post(urls[0]!, '/tokenize', { model: 'm', messages: msgs, cache_salt: 'tenant-a', user: 'u1' })
    expect(salted.body.tokens).toEqual(plain.body.tokens)
    const ids = await remote().tokens({ kind: 'chat', model: 'm', messages: msgs }, urls[0])
    expect(Array.from(ids!)).toEqual(plain.body.tokens)
  })

  it('a repeated request is answered from the cache, and the same ids come back', async () => {
    const { urls, workers } = await fleet({ model: 'm' })
    const t = remote()
    const input = { kind: 'chat' as const, model: 'm', messages: [{ role: 'user', content: 'again and again' }] }
    const first = await t.tokens(input, urls[0])
    await workers[0]!.stop() // a second call that reached the server would now fail
    const second = await t.tokens(input, urls[0])
    expect(Array.from(second!)).toEqual(Array.from(first!))
    expect(t.stats()).toMatchObject({ requests: 2, cacheHits: 1, cacheMisses: 1, failures: 0 })
    second![0] = 12345 // the caller's copy: the cache must not change with it
    expect(Array.from((await t.tokens(input, urls[0]))!)).toEqual(Array.from(first!))
  })

  it('token-id prompts are their own tokens, with no call', async () => {
    const t = remote()
    expect(Array.from((await t.tokens({ kind: 'completion', model: 'm', prompt: [1, 2, 4294967295] }, 'http://127.0.0.1:9'))!)).toEqual([1, 2, 4294967295])
    expect(await t.tokens({ kind: 'completion', model: 'm', prompt: [1, -1] }, 'http://127.0.0.1:9')).toBeUndefined()
    expect(t.stats().failures).toBe(1)
  })
})

describe('remoteTokenizer failures', () => {
  const input = { kind: 'chat' as const, model: 'm', messages: [{ role: 'user', content: 'x' }] }

  it('a server that never answers: undefined after the timeout, counted as a timeout', async () => {
    let arrived = 0
    const url = await server(() => {
      arrived++ // and never answer
    })
    const t = remote({ timeoutMs: 100, timeoutMsPerMiB: 0 })
    expect(await t.tokens(input, url)).toBeUndefined()
    expect(arrived).toBe(1)
    expect(t.stats()).toMatchObject({ timeouts: 1, failures: 0 })
    expect(t.stats().lastFailure).toContain('did not answer within 100 ms')
    // A longer body gets more time, in proportion to its size.
    const long = { ...input, messages: [{ role: 'user', content: 'y'.repeat(64 * 1024) }] }
    const scaled = remote({ timeoutMs: 20, timeoutMsPerMiB: 1000 })
    expect(await scaled.tokens(long, url)).toBeUndefined()
    const ms = Math.ceil(20 + (1000 * requestBody(long).length) / (1024 * 1024))
    expect(ms).toBeGreaterThan(80)
    expect(scaled.stats().lastFailure).toContain(`did not answer within ${ms} ms`)
  })

  it('500, a body that is not JSON, a wrong shape, a wrong count: undefined and counted', async () => {
    const answers = [
      [500, '{"error":{"message":"boom"}}'],
      [200, 'not json {'],
      [200, '{"count":1}'],
      [200, '{"count":3,"tokens":[1,2]}'],
      [200, '{"tokens":[1,2.5]}'],
    ] as const
    let i = 0
    const url = await server((_req, res) => {
      const [status, body] = answers[i++]!
      res.writeHead(status, { 'content-type': 'application/json' }).end(body)
    })
    const t = remote({ cacheEntries: 0 })
    for (let k = 0; k < answers.length; k++) expect(await t.tokens(input, url), String(answers[k])).toBeUndefined()
    expect(t.stats()).toMatchObject({ requests: answers.length, failures: answers.length, timeouts: 0 })
  })

  it('an answer of more ids than the request can have is refused as it arrives, not read to its end: 20 MB of 10M ids', async () => {
    // The answer streamed as the client takes it; `written` is how much of it went out before the client left.
    let written = 0
    let gone!: () => void
    const left = new Promise<void>((r) => (gone = r))
    const url = await server((_req, res) => {
      res.writeHead(200, { 'content-type': 'application/json' })
      res.on('close', () => gone())
      const chunk = Buffer.from(`${'1,'.repeat(32 * 1024)}`)
      res.write('{"tokens":[')
      const more = () => {
        while (written < 20e6 && !res.destroyed) {
          written += chunk.length
          if (!res.write(chunk)) return void res.once('drain', more)
        }
        if (!res.destroyed) res.end('1]}')
      }
      more()
    })
    const t = remote({ cacheEntries: 0 })
    expect(await t.tokens(input, url)).toBeUndefined()
    await left
    // The bound: one id a byte of the request body, plus the allowance. The answer is cut a
    // little past it: what went out beyond is what the sockets' buffers took (a few MB on loopback).
    const body = Buffer.byteLength(requestBody(input))
    expect(written).toBeLessThan(10e6)
    expect(t.stats()).toMatchObject({ failures: 1, timeouts: 0, fallbacks: { too_large: 1 } })
    expect(t.stats().lastFailure).toContain(`more than ${maxTokenIds(body)} ids`)
    expect(t.stats().lastFailureAt).toBeGreaterThan(0)
  })

  it('an answer whose content-length is past the bound is refused before its body is read', async () => {
    let gone!: () => void
    const left = new Promise<void>((r) => (gone = r))
    const url = await server((_req, res) => {
      res.writeHead(200, { 'content-type': 'application/json', 'content-length': String(20e6) })
      res.write('{"tokens":[')
      res.on('close', () => gone())
    })
    const t = remote({ cacheEntries: 0 })
    expect(await t.tokens(input, url)).toBeUndefined()
    await left
    expect(t.stats()).toMatchObject({ failures: 1, fallbacks: { too_large: 1 } })
    expect(t.stats().lastFailure).toMatch(/answered more than \d+ bytes, more than \d+ ids can take \(the request is \d+ bytes\)/)
  })

  it('every fallback is counted by its reason, the last one said in words', async () => {
    const answers = [
      [500, '{}'],
      [200, 'not json {'],
      [200, '{"tokens":[1,2.5]}'],
    ] as const
    let i = 0
    const url = await server((_req, res) => {
      const [status, body] = answers[i++]!
      res.writeHead(status, { 'content-type': 'application/json' }).end(body)
    })
    const t = remote({ cacheEntries: 0 })
    for (let k = 0; k < answers.length; k++) await t.tokens(input, url)
    await t.tokens(input)
    expect(t.stats().fallbacks).toEqual({ refused: 1, malformed: 2, unavailable: 1 })
    expect(t.stats().lastFailure).toBe('no instance to ask')
  })

  it('a refused connection and no instance: undefined and counted', async () => {
    const probe = net.createServer()
    await new Promise<void>((r) => probe.listen(0, '127.0.0.1', r))
    const port = (probe.address() as net.AddressInfo).port
    await new Promise((r) => probe.close(r)) // nothing listens there now
    const t = remote()
    expect(await t.tokens(input, `http://127.0.0.1:${port}`)).toBeUndefined()
    expect(await t.tokens(input)).toBeUndefined()
    expect(t.stats().failures).toBe(2)
  })

  it('sends the body vLLM expects for chats and completions', async () => {
    const bodies: unknown[] = []
    const url = await server((req, res) => {
      let s = ''
      req.on('data', (c) => (s += c))
      req.on('end', () => {
        bodies.push({ path: req.url, body: JSON.parse(s) })
        res.writeHead(200, { 'content-type': 'application/json' }).end('{"count":1,"max_model_len":8,"tokens":[7]}')
      })
    })
    const t = remote()
    const tools = [{ type: 'function', function: { name: 'f', parameters: {} } }]
    await t.tokens({ kind: 'chat', model: 'm', messages: [{ role: 'user', content: 'x' }], tools }, `${url}/`)
    await t.tokens({ kind: 'completion', model: 'm', prompt: 'y' }, url)
    expect(bodies).toEqual([
      { path: '/tokenize', body: { model: 'm', messages: [{ role: 'user', content: 'x' }], add_generation_prompt: true, add_special_tokens: false, tools } },
      { path: '/tokenize', body: { model: 'm', prompt: 'y', add_special_tokens: true } },
    ])
  })

  it('a malformed input is a TypeError, not an undefined', async () => {
    const t = remote()
    await expect(t.tokens({ kind: 'chat', model: 'm', messages: 'hi' } as never, 'http://127.0.0.1:9')).rejects.toThrow(/input.messages must be an array/)
    await expect(t.tokens({ kind: 'other', model: 'm' } as never)).rejects.toThrow(/input.kind/)
  })
})
