import { describe, expect, it } from 'vitest'
import { openAIRequest } from '../../../src/core/key/openai-key.js'

const req = (body: unknown, api: 'chat' | 'completions' = 'chat', limit = 4096) => openAIRequest(api, Buffer.from(JSON.stringify(body)), limit)

describe('routing text of OpenAI requests', () => {
  it('is the messages in order with their roles, whatever the JSON looks like', () => {
    const a = req({ model: 'm', messages: [{ role: 'system', content: 'S' }, { role: 'user', content: [{ type: 'text', text: 'Hel' }, { type: 'text', text: 'lo' }] }] })
    const b = openAIRequest('chat', Buffer.from('{ "temperature": 0.3, "messages": [ {"content": "S", "role": "system"}, {"role":"user","content":"Hello"} ] , "model":"m"}'), 4096)
    expect(b.text).toBe(a.text)
    expect(a.text).toContain('S')
    expect(a.text).toContain('Hello')
    expect(req({ messages: [{ role: 'assistant', content: 'S' }, { role: 'user', content: 'Hello' }] }).text).not.toBe(a.text)
  })

  it('marks where the first user message ends (the anchor), which later turns share', () => {
    const turn1 = req({ messages: [{ role: 'system', content: 'S' }, { role: 'user', content: 'first question' }] })
    const turn2 = req({ messages: [{ role: 'system', content: 'S' }, { role: 'user', content: 'first question' }, { role: 'assistant', content: 'answer' }, { role: 'user', content: 'second' }] })
    expect(turn1.anchor).toBe(turn1.text.length)
    expect(turn2.anchor).toBe(turn1.anchor)
    expect(turn2.text.slice(0, turn2.anchor)).toBe(turn1.text)
    expect(req({ prompt: 'x' }, 'completions').anchor).toBeUndefined()
    expect(req({ messages: [{ role: 'system', content: 'only' }] }).anchor).toBeUndefined()
  })

  it('completions: a prompt string, the first of a batch, or token ids', () => {
    expect(req({ prompt: 'abc' }, 'completions').text).toBe('abc')
    expect(req({ prompt: ['first', 'second'] }, 'completions').text).toBe('first')
    expect(req({ prompt: [1, 2, 3] }, 'completions').text).toBe('1 2 3')
  })

  it('stops concatenating long conversations past twice the limit', () => {
    const long = req({ messages: Array.from({ length: 100 }, (_, i) => ({ role: i % 2 ? 'assistant' : 'user', content: 'x'.repeat(1000) })) }, 'chat', 1024)
    expect(long.text.length).toBe(2048)
  })
})
