// The simulator's /tokenize and /detokenize: vLLM's request and answer shapes, its errors,
// and a round trip back to the text under both tokenizers.
import { describe, expect, it } from 'vitest'
import { fleet, post } from './helpers.js'

const expectError = (r: { status: number; body: any }, status: number, message?: RegExp) => {
  expect(r.status).toBe(status)
  expect(r.body.error).toMatchObject({ code: status, type: expect.any(String) })
  if (message !== undefined) expect(r.body.error.message).toMatch(message)
}

describe('/tokenize and /detokenize', () => {
  for (const tokenizer of ['bytes', 'o200k'] as const) {
    it(`round-trips text (${tokenizer})`, async () => {
      const { urls } = await fleet({ model: 'm', tokenizer, maxModelLen: 4096 })
      for (const prompt of ['hello world', 'odd!', '🎉 日本語 — ünïcödé', 'a\nb\n\n  c']) {
        const t = await post(urls[0]!, '/tokenize', { model: 'm', prompt })
        expect(t.status).toBe(200)
        expect(t.body).toMatchObject({ count: t.body.tokens.length, max_model_len: 4096, token_strs: null })
        const d = await post(urls[0]!, '/detokenize', { model: 'm', tokens: t.body.tokens })
        expect(d.status).toBe(200)
        expect(d.body).toEqual({ prompt })
      }
    })
  }

  it('a chat is the template rendered, as the engine prefills it', async () => {
    const { urls } = await fleet({ model: 'm' })
    const messages = [{ role: 'user', content: 'hi' }]
    const chat = await post(urls[0]!, '/tokenize', { model: 'm', messages })
    const text = await post(urls[0]!, '/tokenize', { model: 'm', prompt: '<|im_start|>user\nhi<|im_end|>\n<|im_start|>assistant\n' })
    expect(chat.body.tokens).toEqual(text.body.tokens)
    const bare = await post(urls[0]!, '/tokenize', { model: 'm', messages, add_generation_prompt: false })
    const detok = await post(urls[0]!, '/detokenize', { model: 'm', tokens: bare.body.tokens })
    expect(detok.body.prompt).toBe('<|im_start|>user\nhi<|im_end|>\n')
  })

  it('token_strs show each token\'s bytes as a byte-level tokenizer does', async () => {
    const { urls } = await fleet({ model: 'm' })
    const r = await post(urls[0]!, '/tokenize', { prompt: 'abcd ef', return_token_strs: true })
    expect(r.body.token_strs).toEqual(['abcd', 'Ġef'])
  })

  it('answers bad requests as vLLM does', async () => {
    const { urls } = await fleet({ model: 'm' })
    const u = urls[0]!
    expectError(await post(u, '/tokenize', '[1]'), 400, /JSON object/)
    expectError(await post(u, '/tokenize', '{"prompt": '), 400, /Invalid JSON/)
    expectError(await post(u, '/tokenize', { model: 'm' }), 400, /messages.*prompt/)
    expectError(await post(u, '/tokenize', { prompt: [1, 2] }), 400, /must be a string/)
    expectError(await post(u, '/tokenize', { prompt: 'x', add_special_tokens: 'yes' }), 400, /add_special_tokens must be a boolean/)
    expectError(await post(u, '/tokenize', { messages: [{ role: 'wizard', content: 'x' }] }), 400, /role/)
    expectError(await post(u, '/tokenize', { messages: [{ role: 'user', content: 'x' }], continue_final_message: true, add_generation_prompt: true }), 400, /Cannot set both/)
    expectError(await post(u, '/tokenize', { model: 'other', prompt: 'x' }), 404, /does not exist/)
    expectError(await post(u, '/detokenize', { tokens: [1, -2] }), 400, /tokens\[1\]/)
    expectError(await post(u, '/detokenize', { tokens: 'abc' }), 400, /tokens/)
    const get = await fetch(`${u}/tokenize`)
    expect(get.status).toBe(405)
  })

  it('an o200k id outside the vocabulary is a 400', async () => {
    const { urls } = await fleet({ model: 'm', tokenizer: 'o200k' })
    expectError(await post(urls[0]!, '/detokenize', { tokens: [300000] }), 400, /Cannot detokenize/)
  })
})
