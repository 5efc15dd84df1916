// The routing text of each API beyond chat and completions, as the router extracts it: the
// same prompt keys the same whichever route carries it, and a body without one is refused
// with a code that names what is missing.
import { describe, expect, it } from 'vitest'
import { openAIRequest, type OpenAIApi } from '../../src/core/key/openai-key.js'
import { RequestError } from '../../src/core/errors.js'

const key = (api: OpenAIApi, body: unknown) => openAIRequest(api, Buffer.from(JSON.stringify(body)), 4096)
const refusal = (api: OpenAIApi, body: unknown): string => {
  try {
    key(api, body)
  } catch (err) {
    if (err instanceof RequestError) return `${err.status} ${err.code}`
    throw err
  }
  throw new Error(`${api} accepted ${JSON.stringify(body)}`)
}

describe('routing text of the other APIs', () => {
  it('embeddings: input as completions reads prompt (a string, the first of a list, token ids), and chat-shaped input as chat', () => {
    for (const input of ['the text', ['the text', 'another'], [1, 2, 3], [[1, 2, 3], [4]]]) {
      expect(key('embeddings', { model: 'e', input }).text).toBe(key('completions', { prompt: input }).text)
    }
    const messages = [{ role: 'system', content: 's' }, { role: 'user', content: [{ type: 'text', text: 'q' }] }]
    expect(key('embeddings', { messages })).toMatchObject({ text: key('chat', { messages }).text, anchor: key('chat', { messages }).anchor })
    expect(key('embeddings', { input: 'x', model: 'e', prompt_cache_key: 'k' })).toMatchObject({ model: 'e', promptCacheKey: 'k' })
  })

  it('responses: instructions then the text parts of the message items, in order, keyed as the same chat', () => {
    const r = key('responses', {
      model: 'm',
      instructions: 'You are terse.',
      input: [
        { role: 'user', content: [{ type: 'input_text', text: 'first' }, { type: 'input_image', image_url: 'data:x' }] },
        { type: 'function_call', call_id: 'c', name: 'f', arguments: '{}' },
        { type: 'function_call_output', call_id: 'c', output: 'not prompt text' },
        { type: 'message', role: 'assistant', content: [{ type: 'output_text', text: 'second' }] },
      ],
      stream: true,
    })
    const same = key('chat', { messages: [{ role: 'system', content: 'You are terse.' }, { role: 'user', content: 'first' }, { role: 'assistant', content: 'second' }] })
    expect(r).toMatchObject({ text: same.text, anchor: same.anchor, stream: true, model: 'm' })
    expect(key('responses', { instructions: 'S', input: 'hello' }).text).toBe(key('chat', { messages: [{ role: 'system', content: 'S' }, { role: 'user', content: 'hello' }] }).text)
    expect(key('responses', { input: 'hello' }).text).not.toBe(key('responses', { instructions: 'S', input: 'hello' }).text)
  })

  it('rerank keys on query, score on text_1; the documents never change it', () => {
    expect(key('rerank', { query: 'q', documents: ['a', 'b'] }).text).toBe('q')
    expect(key('rerank', { query: 'q', documents: ['c'] }).text).toBe(key('rerank', { query: 'q', documents: ['a', 'b'] }).text)
    expect(key('score', { text_1: 'q', text_2: ['a'] }).text).toBe('q')
    expect(key('score', { text_1: ['q', 'r'], text_2: ['a', 'b'] }).text).toBe('q')
    expect(key('rerank', { query: { content: [{ type: 'text', text: 'q' }] }, documents: ['a'] }).text).toBe('q')
  })

  it('tokenize keys on prompt or messages, detokenize on its token ids', () => {
    expect(key('tokenize', { prompt: 'p' }).text).toBe(key('completions', { prompt: 'p' }).text)
    const messages = [{ role: 'user', content: 'hi' }]
    expect(key('tokenize', { messages }).text).toBe(key('chat', { messages }).text)
    expect(key('detokenize', { tokens: [5, 6, 7] }).text).toBe(key('completions', { prompt: [5, 6, 7] }).text)
  })

  it('refuses bodies without the prompt, naming the field', () => {
    expect(refusal('embeddings', { model: 'e' })).toBe('400 missing_input')
    expect(refusal('embeddings', { input: [] })).toBe('400 missing_input')
    expect(refusal('embeddings', { input: 3 })).toBe('400 missing_input')
    expect(refusal('responses', { model: 'm' })).toBe('400 missing_input')
    expect(refusal('responses', { input: 5 })).toBe('400 invalid_input')
    expect(refusal('responses', { input: ['text'] })).toBe('400 invalid_input')
    expect(refusal('responses', { instructions: 7, input: 'x' })).toBe('400 invalid_instructions')
    expect(refusal('responses', { input: [{ role: 'user', content: 4 }] })).toBe('400 invalid_content')
    expect(refusal('rerank', { documents: ['a'] })).toBe('400 missing_query')
    expect(refusal('score', { text_2: 'a' })).toBe('400 missing_query')
    expect(refusal('tokenize', { model: 'm' })).toBe('400 missing_prompt')
    expect(refusal('tokenize', { messages: [{ content: 'no role' }] })).toBe('400 invalid_message')
    expect(refusal('detokenize', { tokens: ['a'] })).toBe('400 missing_tokens')
    expect(refusal('detokenize', {})).toBe('400 missing_tokens')
    expect(refusal('rerank', { query: 'q', model: 3 })).toBe('400 invalid_model')
    expect(refusal('score', [1])).toBe('400 invalid_body')
  })
})
