// serve with the native key extraction routes every body where the TypeScript path sends it,
// and refuses every bad one with the same status and error. Two routers share one stub fleet:
// one reads bodies natively (the default), the other with log.prompts on, which keeps
// openAIRequest (it needs the text as a string to log it).
import { afterAll, beforeAll, describe, expect, it } from 'vitest'
import type { ProxyServer } from '../../src/proxy/proxy.js'
import { post, releaseHeld, startRouter, startStub, totalInFlight, until, type Stub } from '../proxy/helpers.js'

const system = 'You are a meticulous assistant for the ACME support desk. '.repeat(110)
const chatPath = '/v1/chat/completions'
const completionsPath = '/v1/completions'

const routed: [string, string, string][] = [
  ...Array.from({ length: 8 }, (_, i): [string, string, string] => [`chat ${i}`, chatPath, JSON.stringify({ model: 'm', messages: [{ role: 'system', content: `${i}: ${system}` }, { role: 'user', content: `q${i}` }] })]),
  ...Array.from({ length: 6 }, (_, i): [string, string, string] => [`turn 2 of conversation ${i}`, chatPath, JSON.stringify({ messages: [{ role: 'system', content: 'Be brief.' }, { role: 'user', content: `topic ${i}` }, { role: 'assistant', content: 'ok' }, { role: 'user', content: 'more' }] })]),
  ['escapes, astral and lone surrogates', chatPath, `{"messages":[{"role":"user","content":"\\u00e9\\ud83d\\ude00 \\ud800 \\"q\\" ${system.slice(0, 3000)}"}]}`],
  ['parts and an image', chatPath, JSON.stringify({ messages: [{ role: 'user', content: [{ type: 'text', text: system }, { type: 'image_url', image_url: { url: 'data:image/png;base64,AAAA' } }] }] })],
  ['duplicate keys', chatPath, `{"messages":[{"role":"user","content":"decoy"}],"messages":[{"role":"user","content":"${system.slice(0, 5000)}"}]}`],
  ...Array.from({ length: 4 }, (_, i): [string, string, string] => [`prompt_cache_key k${i}`, chatPath, JSON.stringify({ messages: [{ role: 'user', content: 'hello' }], prompt_cache_key: `k${i}` })]),
  ['completions', completionsPath, JSON.stringify({ prompt: `Once upon a time ${system}` })],
  ['completions batch', completionsPath, JSON.stringify({ prompt: ['first of a batch ' + system, 'second'] })],
  ['completions token ids (TypeScript path)', completionsPath, JSON.stringify({ prompt: [1, 2, 3, 4, 5] })],
  ['invalid UTF-8 in a string (TypeScript path)', chatPath, `{"messages":[{"role":"user","content":"caf\u00ff"}]}`],
]

const refused: [string, string, string, string][] = [
  ['syntax error', chatPath, '{"messages":[{"role":"user","content":"hi"}]', 'invalid_json'],
  ['a BOM', chatPath, '\ufeff{"messages":[{"role":"user","content":"hi"}]}', 'invalid_json'],
  ['not an object', chatPath, '[1]', 'invalid_body'],
  ['no messages', chatPath, '{"messages":[]}', 'missing_messages'],
  ['a message without a role', chatPath, '{"messages":[{"content":"x"}]}', 'invalid_message'],
  ['content of the wrong type', chatPath, '{"messages":[{"role":"user","content":5}]}', 'invalid_content'],
  ['model not a string', chatPath, '{"model":5,"messages":[{"role":"user"}]}', 'invalid_model'],
  ['prompt_cache_key not printable', chatPath, '{"prompt_cache_key":"\\u0001","messages":[{"role":"user"}]}', 'invalid_prompt_cache_key'],
  ['no prompt', completionsPath, '{"prompt":[]}', 'missing_prompt'],
  ['a number with a leading zero', completionsPath, '{"prompt":"x","n":01}', 'invalid_json'],
]

let stubs: Stub[] = []
let native: ProxyServer
let reference: ProxyServer

for (const strategy of ['prefix_aware', 'longest_prefix'] as const) {
  describe(`serve with ${strategy}`, () => {
    beforeAll(async () => {
      stubs = await Promise.all(Array.from({ length: 6 }, (_, i) => startStub(`s${i}`)))
      const urls = stubs.map((s) => s.url)
      native = await startRouter(urls, { routing: { strategy } })
      reference = await startRouter(urls, { routing: { strategy }, log: { level: 'silent', prompts: true } })
    })
    afterAll(async () => {
      releaseHeld(stubs)
      for (const r of [native, reference]) {
        await until(() => totalInFlight(r) === 0, 3000, 'in-flight back to 0')
        await r.close()
      }
      await Promise.all(stubs.map((s) => s.close()))
    })

    it('routes every body to the instance the TypeScript path chooses', async () => {
      for (const [name, path, body] of routed) {
        const a = await post(`${native.url}${path}`, raw(body))
        const b = await post(`${reference.url}${path}`, raw(body))
        expect([name, a.status]).toEqual([name, 200])
        expect([name, a.headers.get('x-prefix-router-instance')]).toEqual([name, b.headers.get('x-prefix-router-instance')])
      }
      expect(totalInFlight(native)).toBe(0)
    })

    it('refuses a bad body with the same 400 and error as before', async () => {
      for (const [name, path, body, code] of refused) {
        const a = await post(`${native.url}${path}`, body)
        const b = await post(`${reference.url}${path}`, body)
        expect([name, a.status, JSON.parse(a.text).error.code]).toEqual([name, 400, code])
        expect([name, a.text]).toEqual([name, b.text])
      }
    })
  })
}

/** The body with its U+00FF sent as the single byte 0xFF: not UTF-8. */
function raw(body: string): Buffer {
  const i = body.indexOf('\u00ff')
  return i < 0 ? Buffer.from(body) : Buffer.concat([Buffer.from(body.slice(0, i)), Buffer.of(0xff), Buffer.from(body.slice(i + 1))])
}
