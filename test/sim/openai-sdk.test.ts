import OpenAI from 'openai'
import { describe, expect, it } from 'vitest'
import { fleet } from './helpers.js'

describe('the openai npm SDK against a live worker', () => {
  it('reads non-streaming and streaming chat completions', async () => {
    const { urls } = await fleet()
    const client = new OpenAI({ baseURL: `${urls[0]}/v1`, apiKey: 'sim', maxRetries: 0 })
    const messages = [{ role: 'user' as const, content: 'Say something.' }]
    const full = await client.chat.completions.create({ model: 'sim-tiny', messages, max_tokens: 6 })
    expect(full.choices[0]!.message.content).toHaveLength(24)
    expect(full.choices[0]!.finish_reason).toBe('length')
    expect(full.usage!.completion_tokens).toBe(6)

    const s = await client.chat.completions.create({
      model: 'sim-tiny',
      messages,
      max_tokens: 6,
      stream: true,
      stream_options: { include_usage: true },
    })
    let text = ''
    let finish: string | null = null
    let usage: OpenAI.CompletionUsage | undefined | null
    for await (const chunk of s) {
      text += chunk.choices[0]?.delta.content ?? ''
      finish = chunk.choices[0]?.finish_reason ?? finish
      if (chunk.usage) usage = chunk.usage
    }
    expect(text).toBe(full.choices[0]!.message.content)
    expect(finish).toBe('length')
    expect(usage!.prompt_tokens).toBe(full.usage!.prompt_tokens)
    expect(usage!.prompt_tokens_details!.cached_tokens).toBeGreaterThanOrEqual(0)
  })

  it('reads completions, models, and raises typed errors', async () => {
    const { urls } = await fleet({ loras: ['adapter-x'] })
    const client = new OpenAI({ baseURL: `${urls[0]}/v1`, apiKey: 'sim', maxRetries: 0 })
    const c = await client.completions.create({ model: 'sim-tiny', prompt: 'Hello', max_tokens: 3 })
    expect(c.choices[0]!.text).toHaveLength(12)
    let streamed = ''
    for await (const chunk of await client.completions.create({ model: 'adapter-x', prompt: 'Hello', max_tokens: 3, stream: true })) {
      streamed += chunk.choices[0]?.text ?? ''
    }
    expect(streamed).toBe(c.choices[0]!.text)
    const models = []
    for await (const m of client.models.list()) models.push(m.id)
    expect(models).toEqual(['sim-tiny', 'adapter-x'])
    await expect(client.chat.completions.create({ model: 'nope', messages: [{ role: 'user', content: 'x' }] })).rejects.toBeInstanceOf(
      OpenAI.NotFoundError,
    )
    await expect(client.chat.completions.create({ model: 'sim-tiny', messages: [] })).rejects.toBeInstanceOf(OpenAI.BadRequestError)
  })
})
