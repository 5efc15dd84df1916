// The local tokenizers: the builtins against the simulator's /tokenize and its engine's
// block keys; a model's tokenizer files (written here) against Hugging Face's own encode of
// the rendered text, an independent BPE (gpt-tokenizer) and a template rendering written
// out by hand; the piece cache against uncached runs; load errors naming their file.
import { mkdirSync, mkdtempSync, readFileSync, rmSync, writeFileSync } from 'node:fs'
import { Template } from '@huggingface/jinja'
import os from 'node:os'
import path from 'node:path'
import { Tokenizer as RustTokenizer } from 'tokenizers'
import { Tokenizer as JsTokenizer } from '@huggingface/tokenizers'
import { encode as o200kEncode } from 'gpt-tokenizer/encoding/o200k_base'
import fc from 'fast-check'
import { afterAll, afterEach, describe, expect, it } from 'vitest'
import { TokenizerLoadError, PrefixRouterError } from '../../src/core/errors.js'
import { xxh3Blocks } from '../../src/core/hash.js'
import { cacheSeed } from '../../src/sim/block-hash.js'
import { parseChatRequest, parseCompletionRequest } from '../../src/sim/openai-shapes.js'
import { promptText } from '../../src/tokens/builtin-ids.js'
import { preparePromptSource } from '../../src/sim/request.js'
import { getTokenizer } from '../../src/sim/tokenizers/index.js'
import { localTokenizer, type RequestTokenizer, type TokenizeInput } from '../../src/tokens/index.js'
import { o200kTokenizerJson, O200K_SPECIALS } from '../helpers/o200k-tokenizer-json.js'
import { fleet, post } from '../sim/helpers.js'
import { cases } from './cases.js'

const open: RequestTokenizer[] = []
afterEach(async () => {
  await Promise.all(open.splice(0).map((t) => t.close()))
})
const dirs: string[] = []
afterAll(() => {
  for (const d of dirs) rmSync(d, { recursive: true, force: true })
})

async function local(o: Parameters<typeof localTokenizer>[0]): Promise<RequestTokenizer> {
  const t = await localTokenizer(o)
  open.push(t)
  return t
}

function tmpDir(files: Record<string, string>): string {
  const d = mkdtempSync(path.join(os.tmpdir(), 'tokens-test-'))
  dirs.push(d)
  for (const [name, text] of Object.entries(files)) writeFileSync(path.join(d, name), text)
  return d
}

describe('builtin tokenizers', () => {
  for (const name of ['bytes', 'o200k'] as const) {
    it(`${name}: equal the sim's /tokenize and key the engine's blocks`, async () => {
      const blockSize = 4
      const { urls } = await fleet({ model: 'sim-model', tokenizer: name, blockSize })
      const t = await local({ builtin: name })
      for (const c of cases('sim-model')) {
        const ids = await t.tokens(c.input)
        const remote = await post(urls[0]!, '/tokenize', c.body)
        expect(Array.from(ids!), c.name).toEqual(remote.body.tokens)
        // The engine's own blocks: hashing the ids' bytes gives its block keys.
        const src = c.input.kind === 'chat' ? parseChatRequest(c.body) : parseCompletionRequest(c.body)
        const prepared = preparePromptSource(src, getTokenizer(name), blockSize, cacheSeed('sim-model'))
        expect(ids!.length, c.name).toBe(prepared.promptTokens)
        const bytes = new Uint8Array(ids!.buffer, ids!.byteOffset, ids!.byteLength)
        const keys = [...xxh3Blocks(bytes, blockSize * 4, cacheSeed('sim-model'))].map((h) => Number(BigInt.asUintN(52, h)))
        // Every block the engine keys is the ids' block. The engine keys only blocks full in
        // bytes: under `bytes`, a last block ending in a short (padded) token is not one.
        const full = prepared.blockKeys.length
        expect(keys.slice(0, full), c.name).toEqual([...prepared.blockKeys])
        const text = promptText(src)
        const shortLast = name === 'bytes' && text !== undefined && Buffer.byteLength(text) % 4 !== 0
        expect(keys.length, c.name).toBe(full + (shortLast && ids!.length % blockSize === 0 ? 1 : 0))
      }
      expect(t.stats().failures).toBe(0)
    })
  }

  it('o200k: a resent history hits the segment cache', async () => {
    const t = await local({ builtin: 'o200k' })
    const history = [{ role: 'user', content: `${'A long opening paragraph about caching.\n\n'.repeat(50)}Question one?` }]
    await t.tokens({ kind: 'chat', model: 'm', messages: history })
    const before = t.stats().cacheHits
    await t.tokens({ kind: 'chat', model: 'm', messages: [...history, { role: 'assistant', content: 'Answer.' }, { role: 'user', content: 'More?' }] })
    expect(t.stats().cacheHits).toBeGreaterThan(before)
  })

  it('bad messages: undefined and a failure saying why', async () => {
    const t = await local({ builtin: 'bytes' })
    expect(await t.tokens({ kind: 'chat', model: 'm', messages: [{ role: 'wizard', content: 'x' }] })).toBeUndefined()
    expect(t.stats().failures).toBe(1)
    expect(t.stats().lastFailure).toContain('role')
  })
})

// A WordLevel tokenizer with a lowercasing normalizer, chat markers as special added
// tokens, a non-special token matched after normalization, and a BOS post-processor.
const SPLIT = { type: 'Split', pattern: { Regex: String.raw`\w+|[^\w\s]+|\s+` }, behavior: 'Isolated', invert: false }
const VOCAB = ['\n', ' ', '[UNK]', 'you', 'are', 'terse', '.', 'hello', ',', 'world', '!', 'system', 'user', 'assistant', 'how', 'is', 'it', 'going', '?', 'fine', '日本', '🎉', 'part', 'one', 'two']
function wordLevelJson(o: { rstrip?: boolean; prependFirst?: boolean } = {}): string {
  const vocab = Object.fromEntries(VOCAB.map((w, i) => [w, i]))
  const special = (id: number, content: string, extra: Record<string, unknown> = {}) => ({ id, content, single_word: false, lstrip: false, rstrip: false, normalized: false, special: true, ...extra })
  return JSON.stringify({
    version: '1.0',
    truncation: null,
    padding: null,
    added_tokens: [
      special(100, '<|im_start|>'),
      special(101, '<|im_end|>', o.rstrip === true ? { rstrip: true } : {}),
      special(102, '<s>'),
      { id: 103, content: '<think>', single_word: false, lstrip: false, rstrip: false, normalized: true, special: false },
    ],
    normalizer: { type: 'Lowercase' },
    // Whitespace is kept (as its own pieces), so that a token stripping it shows.
    pre_tokenizer:
      o.prependFirst === true
        ? { type: 'Sequence', pretokenizers: [SPLIT, { type: 'Metaspace', replacement: '▁', prepend_scheme: 'first', split: false }] }
        : SPLIT,
    post_processor: {
      type: 'TemplateProcessing',
      single: [{ SpecialToken: { id: '<s>', type_id: 0 } }, { Sequence: { id: 'A', type_id: 0 } }],
      pair: [{ SpecialToken: { id: '<s>', type_id: 0 } }, { Sequence: { id: 'A', type_id: 0 } }, { Sequence: { id: 'B', type_id: 1 } }],
      special_tokens: { '<s>': { id: '<s>', ids: [102], tokens: ['<s>'] } },
    },
    decoder: null,
    model: { type: 'WordLevel', vocab: { ...vocab, '<|im_start|>': 100, '<|im_end|>': 101, '<s>': 102, '<think>': 103 }, unk_token: '[UNK]' },
  })
}

// One token per character (Latin-1; anything else is [UNK]): two renderings that differ in
// any character differ in their ids, where a word vocabulary maps many words to [UNK].
function charLevelJson(): string {
  const vocab: Record<string, number> = { '[UNK]': 256 }
  for (let c = 0; c < 256; c++) vocab[String.fromCharCode(c)] = c
  return JSON.stringify({
    version: '1.0',
    added_tokens: [],
    normalizer: null,
    pre_tokenizer: { type: 'Split', pattern: { Regex: String.raw`[\s\S]` }, behavior: 'Isolated', invert: false },
    post_processor: null,
    decoder: null,
    model: { type: 'WordLevel', vocab, unk_token: '[UNK]' },
  })
}
const charIds = (text: string): number[] => [...text].map((ch) => (ch.charCodeAt(0) < 256 ? ch.charCodeAt(0) : 256))

const CHATML = String.raw`{{ bos_token }}{% for message in messages %}{{ '<|im_start|>' + message['role'] + '\n' + message['content'] + '<|im_end|>' + '\n' }}{% endfor %}{% if add_generation_prompt %}{{ '<|im_start|>assistant\n' }}{% endif %}`
const PARTS = String.raw`{% for message in messages %}{{ '<|im_start|>' + message.role + '\n' }}{% for part in message.content %}{{ part.text + '|' }}{% endfor %}{{ '<|im_end|>\n' }}{% endfor %}`

function modelDir(o: { template?: unknown; config?: Record<string, unknown>; tokenizer?: string } = {}): string {
  return tmpDir({
    'tokenizer.json': o.tokenizer ?? wordLevelJson(),
    'tokenizer_config.json': JSON.stringify({ bos_token: { __type: 'AddedToken', content: '<s>' }, eos_token: '<|im_end|>', add_bos_token: true, chat_template: o.template ?? CHATML, ...o.config }),
  })
}

const turn1 = [
  { role: 'system', content: 'You are terse.' },
  { role: 'user', content: 'Hello, WORLD! 日本 🎉 <THINK>' },
]
const turn2 = [...turn1, { role: 'assistant', content: 'Fine.' }, { role: 'user', content: 'How is it going?' }]

async function rustIds(json: string, text: string, addSpecial: boolean): Promise<number[]> {
  return (await RustTokenizer.fromString(json).encode(text, null, { addSpecialTokens: addSpecial })).getIds()
}

describe('a model tokenizer from tokenizer.json + tokenizer_config.json', () => {
  it('renders the template as written out by hand and equals Hugging Face encode of that text', async () => {
    const t = await local({ path: modelDir() })
    const ids = await t.tokens({ kind: 'chat', model: 'm', messages: turn1 })
    const text =
      '<s><|im_start|>system\nYou are terse.<|im_end|>\n<|im_start|>user\nHello, WORLD! 日本 🎉 <THINK><|im_end|>\n<|im_start|>assistant\n'
    expect(Array.from(ids!)).toEqual(await rustIds(wordLevelJson(), text, false))
    // An independent implementation agrees, and the ids are what the vocabulary says.
    expect(Array.from(ids!)).toEqual(new JsTokenizer(JSON.parse(wordLevelJson()), {}).encode(text, { add_special_tokens: false }).ids)
    expect(Array.from(ids!).slice(0, 9)).toEqual([102, 100, ...['system', '\n', 'you', ' ', 'are', ' ', 'terse'].map((w) => VOCAB.indexOf(w))])
    expect(Array.from(ids!)).toContain(103) // <THINK> matched after lowercasing
  })

  it('a cached second turn equals an uncached one and Hugging Face encode', async () => {
    const dir = modelDir()
    const warm = await local({ path: dir })
    await warm.tokens({ kind: 'chat', model: 'm', messages: turn1 })
    const hitsBefore = warm.stats().cacheHits
    const cached = await warm.tokens({ kind: 'chat', model: 'm', messages: turn2 })
    expect(warm.stats().cacheHits).toBeGreaterThan(hitsBefore)
    const cold = await local({ path: dir })
    const uncached = await cold.tokens({ kind: 'chat', model: 'm', messages: turn2 })
    expect(Array.from(cached!)).toEqual(Array.from(uncached!))
    const text = (renderOf(dir, turn2))!
    expect(Array.from(cached!)).toEqual(await rustIds(wordLevelJson(), text, false))
  })

  it('completions get the post-processor BOS unless add_special_tokens is false', async () => {
    const t = await local({ path: modelDir() })
    const prompt = 'hello <|im_end|> world'
    expect(Array.from((await t.tokens({ kind: 'completion', model: 'm', prompt }))!)).toEqual(await rustIds(wordLevelJson(), prompt, true))
    expect(Array.from((await t.tokens({ kind: 'completion', model: 'm', prompt, addSpecialTokens: false }))!)).toEqual(await rustIds(wordLevelJson(), prompt, false))
    expect((await t.tokens({ kind: 'completion', model: 'm', prompt }))![0]).toBe(102)
  })

  for (const [name, json] of [
    ['an added token with rstrip', wordLevelJson({ rstrip: true })],
    ['a Metaspace that prepends to the first piece only', wordLevelJson({ prependFirst: true })],
  ] as const) {
    it(`${name}: cached turns still equal Hugging Face encode`, async () => {
      const dir = modelDir({ tokenizer: json })
      const t = await local({ path: dir })
      for (const msgs of [turn1, turn2, turn2]) {
        const ids = await t.tokens({ kind: 'chat', model: 'm', messages: [...msgs.slice(0, -1), { role: 'user', content: ` ${msgs.at(-1)!.content}  ` }] })
        const text = (renderOf(dir, [...msgs.slice(0, -1), { role: 'user', content: ` ${msgs.at(-1)!.content}  ` }]))!
        expect(Array.from(ids!)).toEqual(await rustIds(json, text, false))
      }
    })
  }

  it('any chat, with a cache kept across them, equals Hugging Face encode of the whole', async () => {
    const words = fc.constantFrom(' ', '  ', '\n', '\n ', 'hello', 'WORLD', ',', '!', '日本', '🎉', '<think>', '<THINK>', '<s>', '<|im_end|>', '<|im_', 'zzz')
    const text = fc.array(words, { maxLength: 10 }).map((xs) => xs.join(''))
    const chat = fc.array(fc.record({ role: fc.constantFrom('system', 'user', 'assistant'), content: text }), { minLength: 1, maxLength: 4 })
    for (const json of [wordLevelJson(), wordLevelJson({ rstrip: true }), wordLevelJson({ prependFirst: true })]) {
      const dir = modelDir({ tokenizer: json })
      const t = await local({ path: dir })
      const rust = RustTokenizer.fromString(json)
      await fc.assert(
        fc.asyncProperty(chat, fc.boolean(), async (msgs, special) => {
          const ids = await t.tokens({ kind: 'chat', model: 'm', messages: msgs, addSpecialTokens: special })
          expect(Array.from(ids!)).toEqual((await rust.encode(renderOf(dir, msgs)!, null, { addSpecialTokens: special })).getIds())
        }),
        { numRuns: 100 },
      )
    }
  })

  it('a list of templates uses "default"; a template over content parts gets parts', async () => {
    const t = await local({ path: modelDir({ template: [{ name: 'other', template: 'nope' }, { name: 'default', template: PARTS }], tokenizer: charLevelJson() }) })
    const msgs = [{ role: 'user', content: [{ type: 'text', text: 'part one' }, { type: 'text', text: 'part two' }] }, { role: 'assistant', content: 'fine' }]
    const ids = await t.tokens({ kind: 'chat', model: 'm', messages: msgs })
    expect(Array.from(ids!)).toEqual(charIds('<|im_start|>user\npart one|part two|<|im_end|>\n<|im_start|>assistant\nfine|<|im_end|>\n'))
  })

  it('string content format joins text parts with a newline; images cannot be tokenized here', async () => {
    const t = await local({ path: modelDir({ tokenizer: charLevelJson() }) })
    const parts = [{ role: 'user', content: [{ type: 'text', text: 'part one' }, { type: 'text', text: 'part two' }] }]
    const ids = await t.tokens({ kind: 'chat', model: 'm', messages: parts, addGenerationPrompt: false })
    expect(Array.from(ids!)).toEqual(charIds('<s><|im_start|>user\npart one\npart two<|im_end|>\n'))
    const image = [{ role: 'user', content: [{ type: 'image_url', image_url: { url: 'data:,' } }] }]
    expect(await t.tokens({ kind: 'chat', model: 'm', messages: image })).toBeUndefined()
    expect(t.stats().lastFailure).toContain("'image_url' part")
  })

  it('tools reach the template as vLLM dumps them; "tool_use" is chosen when there are tools', async () => {
    const templates = [
      { name: 'default', template: 'plain {{ messages[0].content }}' },
      { name: 'tool_use', template: '{{ tools | tojson }} {{ messages[1].tool_calls[0].function.arguments.city }}' },
    ]
    const t = await local({ path: modelDir({ template: templates, tokenizer: charLevelJson() }) })
    const messages = [
      { role: 'user', content: 'hello' },
      { role: 'assistant', content: null, tool_calls: [{ id: 'c', type: 'function', function: { name: 'get', arguments: '{"city": "world"}' } }] },
    ]
    const tools = [{ type: 'function', function: { name: 'get', parameters: { type: 'object' } } }]
    const text = '[{"type": "function", "function": {"name": "get", "description": null, "parameters": {"type": "object"}, "strict": null}}] world'
    expect(Array.from((await t.tokens({ kind: 'chat', model: 'm', messages, tools }))!)).toEqual(charIds(text))
    expect(Array.from((await t.tokens({ kind: 'chat', model: 'm', messages }))!)).toEqual(charIds('plain hello'))
    expect(await t.tokens({ kind: 'chat', model: 'm', messages, tools: [{ type: 'custom' }] })).toBeUndefined()
  })

  it('a template that raises: undefined and the reason', async () => {
    const t = await local({ path: modelDir({ template: "{{ raise_exception('roles must alternate') }}" }) })
    expect(await t.tokens({ kind: 'chat', model: 'm', messages: turn1 })).toBeUndefined()
    expect(t.stats().lastFailure).toContain('roles must alternate')
  })

  it('a tokenizer.json file with chatTemplate, and chat_template.jinja beside it', async () => {
    const dir = tmpDir({ 'tokenizer.json': wordLevelJson(), 'chat_template.jinja': '{{ messages[0].content }}' })
    const fromJinja = await local({ path: dir })
    expect(Array.from((await fromJinja.tokens({ kind: 'chat', model: 'm', messages: turn1 }))!)).toEqual(await rustIds(wordLevelJson(), 'You are terse.', false))
    const fromOption = await local({ path: path.join(dir, 'tokenizer.json'), chatTemplate: '{{ messages[1].content }}' })
    expect(Array.from((await fromOption.tokens({ kind: 'chat', model: 'm', messages: turn1 }))!)).toEqual(await rustIds(wordLevelJson(), turn1[1]!.content, false))
  })
})

function renderOf(dir: string, messages: unknown[]): string | undefined {
  // The text the tokenizer should have encoded: the config's template rendered directly (the
  // first test pins this rendering to a string written out by hand).
  const cfg = JSON.parse(readFileSync(path.join(dir, 'tokenizer_config.json'), 'utf8'))
  return new Template(cfg.chat_template).render({ messages, bos_token: '<s>', eos_token: '<|im_end|>', add_generation_prompt: true })
}

describe('a real-sized BPE: o200k as a tokenizer.json', () => {
  let dir: string
  it('equals gpt-tokenizer on chats, multi-byte text and code, cached or not', async () => {
    const json = o200kTokenizerJson()
    dir = tmpDir({
      'tokenizer.json': json,
      'tokenizer_config.json': JSON.stringify({ eos_token: '<|im_end|>', chat_template: CHATML.replace('{{ bos_token }}', '') }),
    })
    const t = await local({ path: dir })
    const specials = new Map(O200K_SPECIALS)
    const convo = [
      { role: 'system', content: 'You are a helpful assistant.\n\nRules:\n  1. be brief\n  2. cite' },
      { role: 'user', content: "Don't panic! It's 2024... 日本語のテキスト、한국어 🎉👍🏽 \r\n\tcode: foo(bar) { return 1234567; }" },
    ]
    for (const msgs of [convo, [...convo, { role: 'assistant', content: 'Sure — here.' }, { role: 'user', content: 'And again?' }]]) {
      const input: TokenizeInput = { kind: 'chat', model: 'm', messages: msgs }
      const ids = await t.tokens(input)
      const text = (renderOf(dir, msgs))!
      expect(Array.from(ids!)).toEqual(await rustIds(json, text, false))
      // gpt-tokenizer's own special-token matching misses some markers, so the markers are
      // split out here and only the text between them goes through its BPE.
      const expected = text.split(/(<\|im_start\|>|<\|im_end\|>)/).flatMap((p) => (specials.has(p) ? [specials.get(p)!] : p === '' ? [] : o200kEncode(p)))
      expect(Array.from(ids!)).toEqual(expected)
    }
    expect(t.stats().cacheHits).toBeGreaterThan(0)

    // Any chats, one warm cache across them all: always Hugging Face's encode of the whole.
    const rust = RustTokenizer.fromString(json)
    const alphabet = fc.constantFrom(' ', '  ', '\n', '\n\n', '\r\n', '\t', 'a', 'Zeta', 'word', "'s", '1234', '!', '...', '日本', '🎉', '<|im_', '|>', '<|im_end|>', '/', 'é')
    const text = fc.array(alphabet, { maxLength: 12 }).map((xs) => xs.join(''))
    const message = fc.record({ role: fc.constantFrom('system', 'user', 'assistant'), content: text })
    await fc.assert(
      fc.asyncProperty(fc.array(message, { minLength: 1, maxLength: 5 }), async (msgs) => {
        const ids = await t.tokens({ kind: 'chat', model: 'm', messages: msgs })
        const whole = (await rust.encode(renderOf(dir, msgs)!, null, { addSpecialTokens: false })).getIds()
        expect(Array.from(ids!)).toEqual(whole)
      }),
      { numRuns: 60 },
    )
  })
})

describe('load errors name the file', () => {
  const expectLoadError = async (o: Parameters<typeof localTokenizer>[0], file: string, what: RegExp) => {
    const err = await localTokenizer(o).then(
      () => undefined,
      (e: unknown) => e,
    )
    expect(err).toBeInstanceOf(TokenizerLoadError)
    expect(err).toBeInstanceOf(PrefixRouterError)
    expect((err as TokenizerLoadError).code).toBe('TOKENIZER_LOAD')
    expect((err as TokenizerLoadError).details.file).toBe(file)
    expect((err as Error).message).toContain(file)
    expect((err as Error).message).toMatch(what)
  }

  it('a path that does not exist', async () => {
    const p = path.join(os.tmpdir(), 'no-such-tokenizer-dir-x')
    await expectLoadError({ path: p }, p, /no such file or directory/)
  })

  it('a directory without tokenizer.json', async () => {
    const d = tmpDir({ 'tokenizer_config.json': '{}' })
    await expectLoadError({ path: d }, path.join(d, 'tokenizer.json'), /not found/)
  })

  it('bad JSON in tokenizer.json and in tokenizer_config.json', async () => {
    const d1 = tmpDir({ 'tokenizer.json': '{"model": ', 'tokenizer_config.json': '{}' })
    await expectLoadError({ path: d1 }, path.join(d1, 'tokenizer.json'), /not valid JSON/)
    const d2 = tmpDir({ 'tokenizer.json': wordLevelJson(), 'tokenizer_config.json': '{chat_template: 1' })
    await expectLoadError({ path: d2 }, path.join(d2, 'tokenizer_config.json'), /not valid JSON/)
  })

  it('no chat_template, and no "default" among several', async () => {
    const d1 = tmpDir({ 'tokenizer.json': wordLevelJson(), 'tokenizer_config.json': '{"eos_token": "</s>"}' })
    await expectLoadError({ path: d1 }, path.join(d1, 'tokenizer_config.json'), /no chat_template/)
    const d2 = modelDir({ template: [{ name: 'tool_use', template: 'x' }] })
    await expectLoadError({ path: d2 }, path.join(d2, 'tokenizer_config.json'), /no "default" template \(it has tool_use\)/)
  })

  it('a template that does not parse, a tokenizer.json the library rejects', async () => {
    const d1 = modelDir({ template: '{% for x in %}' })
    await expectLoadError({ path: d1 }, path.join(d1, 'tokenizer_config.json'), /does not parse/)
    const d2 = modelDir({ tokenizer: JSON.stringify({ model: { type: 'Nope' } }) })
    await expectLoadError({ path: d2 }, path.join(d2, 'tokenizer.json'), /cannot load|can load/)
  })

  it('a directory, not a file, where tokenizer.json should be', async () => {
    const d = tmpDir({})
    mkdirSync(path.join(d, 'tokenizer.json'))
    await expectLoadError({ path: d }, path.join(d, 'tokenizer.json'), /cannot be read/)
  })
})

describe('bad options', () => {
  it('are range errors naming the option', async () => {
    await expect(localTokenizer({ builtin: 'gpt2' as never })).rejects.toThrow(/builtin must be 'bytes' or 'o200k'/)
    await expect(localTokenizer({ path: modelDir(), cacheEntries: -1 })).rejects.toThrow(/cacheEntries/)
    await expect(localTokenizer({ path: modelDir(), contentFormat: 'xml' as never })).rejects.toThrow(/contentFormat/)
    await expect(localTokenizer({ path: '' })).rejects.toThrow(/path must be a non-empty string/)
  })
})
