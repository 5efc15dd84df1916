// vLLM's OpenAI surface: shapes of answers and of errors, and the other endpoints.
import { describe, expect, it } from 'vitest'
import { fleet, get, post, stream } from './helpers.js'

function expectError(r: { status: number; headers: Headers; body: any }, status: number, type?: string): void {
  expect(r.status).toBe(status)
  expect(r.headers.get('x-sim-instance')).toBe('sim-0')
  expect(r.headers.get('content-type')).toBe('application/json')
  expect(Object.keys(r.body)).toEqual(['error'])
  expect(typeof r.body.error.message).toBe('string')
  expect(r.body.error.message.length).toBeGreaterThan(0)
  expect(typeof r.body.error.type).toBe('string')
  expect(r.body.error.code).toBe(status)
  if (type !== undefined) expect(r.body.error.type).toBe(type)
}

describe('chat and completions', () => {
  it('answers a chat completion in vLLM\'s shape, bounded by max_tokens, deterministic', async () => {
    const { urls } = await fleet()
    const body = { model: 'sim-tiny', messages: [{ role: 'user', content: 'Hello!' }], max_tokens: 7 }
    const r = await post(urls[0]!, '/v1/chat/completions', body)
    expect(r.status).toBe(200)
    expect(r.headers.get('x-sim-instance')).toBe('sim-0')
    expect(r.body.id).toMatch(/^chatcmpl-[0-9a-f]{32}$/)
    expect(r.body.object).toBe('chat.completion')
    expect(r.body.model).toBe('sim-tiny')
    const c = r.body.choices[0]
    expect(c.index).toBe(0)
    expect(c.message.role).toBe('assistant')
    expect(c.finish_reason).toBe('length')
    expect(c.message.content.length).toBe(28) // 7 tokens of 4 characters
    expect(r.body.usage).toEqual({
      prompt_tokens: r.body.usage.prompt_tokens,
      total_tokens: r.body.usage.prompt_tokens + 7,
      completion_tokens: 7,
      prompt_tokens_details: { cached_tokens: 0 },
    })
    const again = await post(urls[0]!, '/v1/chat/completions', body)
    expect(again.body.choices[0].message.content).toBe(c.message.content)
    const bounded = await post(urls[0]!, '/v1/chat/completions', { ...body, max_tokens: 100, max_completion_tokens: 3 })
    expect(bounded.body.usage.completion_tokens).toBe(3)
  })

  it('without max_tokens, stops after the default output length with finish_reason "stop"', async () => {
    const { urls } = await fleet({ outputTokens: 5 })
    const r = await post(urls[0]!, '/v1/chat/completions', { messages: [{ role: 'user', content: 'hi' }] })
    expect(r.body.usage.completion_tokens).toBe(5)
    expect(r.body.choices[0].finish_reason).toBe('stop')
  })

  it('streams chat: role chunk, one delta per token, finish_reason, usage chunk, [DONE]', async () => {
    const { urls } = await fleet()
    const s = await stream(urls[0]!, '/v1/chat/completions', {
      messages: [{ role: 'user', content: 'stream please' }],
      max_tokens: 5,
      stream_options: { include_usage: true },
    })
    expect(s.status).toBe(200)
    expect(s.headers.get('content-type')).toBe('text/event-stream; charset=utf-8')
    expect(s.headers.get('x-sim-instance')).toBe('sim-0')
    const chunks = s.events.map((e) => e.slice(6)).filter((d) => d !== '[DONE]').map((d) => JSON.parse(d))
    expect(chunks[0].object).toBe('chat.completion.chunk')
    expect(chunks[0].choices[0].delta).toEqual({ role: 'assistant', content: '' })
    const deltas = chunks.filter((c) => c.choices.length === 1 && c.choices[0].delta.content)
    expect(deltas.length).toBe(5)
    expect(deltas.slice(0, 4).every((c) => c.choices[0].finish_reason === null)).toBe(true)
    expect(deltas[4].choices[0].finish_reason).toBe('length')
    const last = chunks.at(-1)
    expect(last.choices).toEqual([])
    expect(last.usage.completion_tokens).toBe(5)
    expect(new Set(chunks.map((c) => c.id)).size).toBe(1)
    expect(s.events.at(-1)).toBe('data: [DONE]')
    expect(s.content.length).toBe(20)
  })

  it('streams completions with text chunks and no usage chunk unless asked', async () => {
    const { urls } = await fleet()
    const s = await stream(urls[0]!, '/v1/completions', { prompt: 'Once upon a time', max_tokens: 4 })
    const chunks = s.events.filter((e) => e !== 'data: [DONE]').map((e) => JSON.parse(e.slice(6)))
    expect(chunks.length).toBe(4)
    expect(chunks.every((c) => c.object === 'text_completion' && typeof c.choices[0].text === 'string')).toBe(true)
    expect(chunks.every((c) => c.usage === undefined)).toBe(true)
    expect(chunks[3].choices[0].finish_reason).toBe('length')
    expect(s.done).toBe(true)
  })

  it('accepts completion prompts as token ids, one token per id', async () => {
    const { urls } = await fleet()
    const r = await post(urls[0]!, '/v1/completions', { prompt: [1, 2, 3, 4, 5, 6, 7, 8, 9, 10], max_tokens: 1 })
    expect(r.status).toBe(200)
    expect(r.body.object).toBe('text_completion')
    expect(r.body.usage.prompt_tokens).toBe(10)
  })

  it('serves /invocations with a chat body or a completion body', async () => {
    const { urls } = await fleet()
    const chat = await post(urls[0]!, '/invocations', { messages: [{ role: 'user', content: 'hi' }], max_tokens: 2 })
    expect(chat.body.object).toBe('chat.completion')
    const comp = await post(urls[0]!, '/invocations', { prompt: 'hi', max_tokens: 2 })
    expect(comp.body.object).toBe('text_completion')
    const s = await stream(urls[0]!, '/invocations', { messages: [{ role: 'user', content: 'hi' }], max_tokens: 2 })
    expect(s.done).toBe(true)
    expect(s.content.length).toBe(8)
    expectError(await post(urls[0]!, '/invocations', { foo: 1 }), 400)
  })
})

describe('bad input gets the error shape and the server keeps serving', () => {
  it('400 for malformed JSON, missing fields and bad values; 404 for an unknown model', async () => {
    const { urls } = await fleet()
    const u = urls[0]!
    expectError(await post(u, '/v1/chat/completions', '{"messages": [tru'), 400, 'BadRequestError')
    expectError(await post(u, '/v1/chat/completions', ''), 400)
    expectError(await post(u, '/v1/chat/completions', { model: 'sim-tiny' }), 400)
    expectError(await post(u, '/v1/chat/completions', { messages: 'hi' }), 400)
    expectError(await post(u, '/v1/chat/completions', { messages: [] }), 400)
    expectError(await post(u, '/v1/chat/completions', { messages: [{ role: 'wizard', content: 'x' }] }), 400)
    expectError(await post(u, '/v1/chat/completions', { messages: [{ role: 'user' }] }), 400)
    expectError(await post(u, '/v1/chat/completions', { messages: [{ role: 'user', content: 'x' }], max_tokens: 0 }), 400)
    expectError(await post(u, '/v1/chat/completions', { messages: [{ role: 'user', content: 'x' }], max_tokens: 2.5 }), 400)
    expectError(await post(u, '/v1/chat/completions', { messages: [{ role: 'user', content: 'x' }], stream: 'yes' }), 400)
    expectError(
      await post(u, '/v1/chat/completions', { messages: [{ role: 'user', content: 'x' }], stream_options: { include_usage: true } }),
      400,
    )
    expectError(await post(u, '/v1/chat/completions', { messages: [{ role: 'user', content: 'x' }], cache_salt: '' }), 400)
    expectError(await post(u, '/v1/completions', { max_tokens: 3 }), 400)
    expectError(await post(u, '/v1/completions', { prompt: '' }), 400)
    expectError(await post(u, '/v1/completions', { prompt: ['a', 'b'] }), 400)
    expectError(await post(u, '/v1/completions', { prompt: [1, -2] }), 400)
    expectError(await post(u, '/v1/completions', [1, 2]), 400)
    expectError(await post(u, '/v1/completions', { prompt: 'x', max_tokens: 40_000 }), 400)
    const unknown = await post(u, '/v1/chat/completions', { model: 'gpt-9', messages: [{ role: 'user', content: 'x' }] })
    expectError(unknown, 404, 'NotFoundError')
    expect(unknown.body.error.message).toBe('The model `gpt-9` does not exist.')
    expectError(await post(u, '/v1/nope', {}), 404)
    const wrongMethod = await fetch(`${u}/v1/chat/completions`)
    expect(wrongMethod.status).toBe(405)
    expect(((await wrongMethod.json()) as { error: { code: number } }).error.code).toBe(405)
    // still serving
    expect((await post(u, '/v1/completions', { prompt: 'still here', max_tokens: 1 })).status).toBe(200)
  })

  it('413 for an oversized body', async () => {
    const { urls } = await fleet()
    const r = await post(urls[0]!, '/v1/completions', 'x'.repeat(65 * 1024 * 1024))
    expectError(r, 413)
  })
})

describe('models, LoRA adapters, health', () => {
  it('lists the base model and adapters with parent set; loads and unloads adapters', async () => {
    const { urls } = await fleet({ model: 'base-model', loras: ['a1=/lora/a1'] })
    const u = urls[0]!
    const list = JSON.parse((await get(u, '/v1/models')).text)
    expect(list.object).toBe('list')
    expect(list.data.map((m: any) => [m.id, m.parent, m.root])).toEqual([
      ['base-model', null, 'base-model'],
      ['a1', 'base-model', '/lora/a1'],
    ])
    expect(list.data[0].object).toBe('model')
    expect(list.data[0].owned_by).toBe('vllm')
    expect(list.data[0].max_model_len).toBe(32768)

    const load = await post(u, '/v1/load_lora_adapter', { lora_name: 'a2', lora_path: '/lora/a2' })
    expect(load.status).toBe(200)
    expectError(await post(u, '/v1/load_lora_adapter', { lora_name: 'a2', lora_path: '/lora/a2' }), 400)
    expectError(await post(u, '/v1/load_lora_adapter', { lora_name: 'a3' }), 400)
    expect((await post(u, '/v1/completions', { model: 'a2', prompt: 'x', max_tokens: 1 })).body.model).toBe('a2')
    expect(JSON.parse((await get(u, '/v1/models')).text).data.map((m: any) => m.id)).toEqual(['base-model', 'a1', 'a2'])
    expect((await post(u, '/v1/unload_lora_adapter', { lora_name: 'a2' })).status).toBe(200)
    expectError(await post(u, '/v1/unload_lora_adapter', { lora_name: 'a2' }), 404)
    expectError(await post(u, '/v1/completions', { model: 'a2', prompt: 'x' }), 404)
  })

  it('answers /health and /ping, each response tagged with its instance', async () => {
    const { urls } = await fleet({ instances: 2 })
    for (const [i, u] of urls.entries()) {
      for (const path of ['/health', '/ping', '/metrics', '/v1/models']) {
        const r = await get(u, path)
        expect(r.status).toBe(200)
        expect(r.headers.get('x-sim-instance')).toBe(`sim-${i}`)
      }
    }
  })
})
