// Chat and completions bodies for property tests: mostly well-formed, with odd text (quotes,
// escapes, astral and lone surrogates, line separators), odd values anywhere, bodies cut
// short into invalid JSON, and bytes that are not JSON at all.
import fc from 'fast-check'
import type { OpenAIApi } from '../../src/core/key/openai-key.js'

const text = fc.oneof(fc.string({ maxLength: 300 }), fc.string({ unit: 'grapheme', maxLength: 100 }), fc.string({ unit: 'binary', maxLength: 100 }), fc.constantFrom('"', '\\', '[[[', '}]', '\u2028', '\ud800'))
const weird = fc.anything({ maxDepth: 1 })
/** Mostly a well-formed value, sometimes anything at all. */
const mostly = <T,>(good: fc.Arbitrary<T>) => fc.oneof({ arbitrary: good, weight: 9 }, { arbitrary: weird, weight: 1 })
const part = mostly(fc.oneof(fc.record({ type: fc.constant('text'), text }), fc.record({ type: fc.constant('image_url'), image_url: fc.oneof(fc.record({ url: text }), text) })))
const message = mostly(fc.record({ role: fc.constantFrom('system', 'user', 'assistant', 'tool'), content: fc.oneof(text, fc.array(part, { maxLength: 4 }), fc.constant(null)) }))
const chatBody = fc.record(
  { model: mostly(text), messages: mostly(fc.array(message, { minLength: 1, maxLength: 6 })), prompt_cache_key: mostly(text), stream: fc.boolean() },
  { requiredKeys: ['messages'] },
)
const completionBody = fc.record(
  { model: mostly(text), prompt: mostly(fc.oneof(text, fc.array(text, { maxLength: 3 }), fc.array(fc.integer(), { maxLength: 20 }), fc.array(fc.array(fc.nat(), { maxLength: 5 }), { maxLength: 2 }))) },
  { requiredKeys: ['prompt'] },
)
const anyApi = fc.constantFrom<OpenAIApi>('chat', 'completions')
const pair = (api: OpenAIApi, raw: Buffer): [OpenAIApi, Buffer] => [api, raw]
/** An API and a body for it (not always a valid one). */
export const openAIBodies = fc.oneof(
  fc.tuple(chatBody, fc.constantFrom(undefined, 2)).map(([b, indent]) => pair('chat', Buffer.from(JSON.stringify(b, null, indent)))),
  completionBody.map((b) => pair('completions', Buffer.from(JSON.stringify(b)))),
  fc.tuple(anyApi, fc.oneof(chatBody, completionBody), fc.nat()).map(([api, b, cut]) => {
    const s = Buffer.from(JSON.stringify(b))
    return pair(api, s.subarray(0, cut % (s.length + 1))) // cut short: invalid JSON
  }),
  fc.tuple(anyApi, fc.uint8Array({ maxLength: 300 })).map(([api, b]) => pair(api, Buffer.from(b))),
)

