// The o200k tokenizer: segment-cached tokens equal a direct encode of the whole text, and
// a prompt's count and block keys are those of its token ids.
import { spawn, spawnSync } from 'node:child_process'
import { fileURLToPath } from 'node:url'
import fc from 'fast-check'
import { encode } from 'gpt-tokenizer/encoding/o200k_base'
import { describe, expect, it } from 'vitest'
import { cacheSeed, preparePrompt } from '../../src/sim/block-hash.js'
import { renderChat } from '../../src/tokens/chatml.js'
import { resolveSim } from '../../src/sim/config.js'
import { getTokenizer } from '../../src/sim/tokenizers/index.js'
import { SegmentCache, segments } from '../../src/tokens/segment-cache.js'
import { encodeTokenIds, fillerText } from '../../src/sim/tokenizer.js'
import { VirtualFleet, type VirtualRequest } from '../../src/sim/virtual-fleet.js'
import { fleet, metric, parsePrometheus, post, scrape } from './helpers.js'

const cli = fileURLToPath(new URL('../../dist/cli.js', import.meta.url))

const plain = { disallowedSpecial: new Set<string>() }
const direct = (text: string): number[] => encode(text, plain)

// Pieces chosen around the cut points: newline runs with and without \r, blank lines,
// whitespace on either side of a newline, '/' and punctuation after newlines, special
// token strings, letters of several scripts, digits, contractions, lone surrogates.
const piece = fc.oneof(
  fc.constantFrom(
    '\n', '\r\n', '\r', '\n\n', '\n\n\n', '\r\n\r\n', ' ', '  ', '\t', ' \n', '  \n\n', '\n ', '\n\t', '/', '//', '\n/', '\n\n/x',
    '.', ' .\n\n', ' .\n\n the', '.\n\n ', '\u0301\n ', ').\n/\n\t', '!?', '"', "'s", "'LL", ':', '<|im_start|>', '<|im_end|>\n', '<|endoftext|>', 'a', 'Hello', 'WORLD', 'éte',
    'naïve', 'Ωμέγα', '日本語', '한국어', '😀', '👍🏽', '\u00a0', '\u2028', '\u3000', '\u0301', '123', '4567', '\uD800', '\uDC00x',
  ),
  fc.string({ unit: 'grapheme', maxLength: 12 }),
  fc.string({ unit: 'binary', maxLength: 6 }),
)
const text = fc.array(piece, { maxLength: 40 }).map((p) => p.join(''))

describe('o200k segment cache', () => {
  it('cuts texts into segments that join back to the text', () => {
    fc.assert(fc.property(text, (t) => segments(t).join('') === t))
    expect(segments('a\n\nb\n c\n/d\r\ne')).toEqual(['a\n\n', 'b\n c\n/d\r\n', 'e'])
    expect(segments(' the cat .\n\n the dog .\n\n')).toEqual([' the cat .\n\n', ' the dog .\n\n'])
    expect(segments('')).toEqual([''])
  })

  it('gives the tokens of a direct encode of the whole text, cached or not, under eviction', () => {
    const roomy = new SegmentCache(direct)
    const tight = new SegmentCache(direct, 400) // evicts nearly every time
    fc.assert(
      fc.property(fc.array(text, { minLength: 1, maxLength: 4 }), (texts) => {
        // Later texts repeat earlier ones' segments in new company, as prompts do.
        const whole = texts.join('\n')
        const want = direct(whole)
        for (const c of [roomy, tight]) {
          for (const t of texts) expect([...c.encode(t)]).toEqual(direct(t))
          expect([...c.encode(whole)]).toEqual(want)
          expect([...c.encode(whole)]).toEqual(want)
        }
      }),
      { numRuns: 400 },
    )
    expect(roomy.hits).toBeGreaterThan(0)
    expect(tight.tokens).toBeLessThanOrEqual(400)
  })

  it('drops the least recently used segments first, within its token budget', () => {
    // Segments of 17 tokens, each costing 17 + 16 (its overhead): room for four, not five.
    const seg = (w: string): string => `${` ${w}`.repeat(16)}.\n`
    const [a, b, c, d, e] = ['red', 'green', 'blue', 'cat', 'dog'].map(seg) as [string, string, string, string, string]
    const cache = new SegmentCache(direct, 5 * 33 - 1)
    cache.encode(a + b + c + d)
    cache.encode(a) // a is now the most recently used
    cache.encode(e) // over budget: b goes, the oldest, not a
    expect([cache.hits, cache.misses]).toEqual([1, 5])
    cache.encode(a + c + d)
    expect([cache.hits, cache.misses]).toEqual([4, 5])
    cache.encode(b)
    expect([cache.hits, cache.misses]).toEqual([4, 6])
    expect(cache.tokens).toBe(4 * 17)
  })

  it('tokenizes a repeated document once', () => {
    const doc = 'Clause 1. The tenant pays rent.\nClause 2. The landlord repairs.\n'.repeat(200)
    const c = new SegmentCache(direct)
    expect([...c.encode(`Question A\n${doc}Question B?`)]).toEqual(direct(`Question A\n${doc}Question B?`))
    const missesBefore = c.misses
    expect([...c.encode(`Other question\n${doc}Question C?`)]).toEqual(direct(`Other question\n${doc}Question C?`))
    expect(c.misses - missesBefore).toBe(2) // the new first line and the new last line
  })
})

describe('o200k prompts', () => {
  const o200k = getTokenizer('o200k')
  const seed = cacheSeed('m')

  it('counts tokens as gpt-tokenizer does and keys blocks of token ids', () => {
    const t = 'The quick brown fox jumps over the lazy dog.\n'.repeat(40)
    const p = o200k.prepareText(t, 16, seed)
    expect(p.promptTokens).toBe(direct(t).length)
    expect(p).toEqual(preparePrompt(encodeTokenIds(direct(t)), 16, seed))
    expect(o200k.prepareText('', 16, seed).promptTokens).toBe(0)
    expect(o200k.prepareText('stop <|endoftext|> here', 16, seed).promptTokens).toBe(direct('stop <|endoftext|> here').length)
  })

  it('the virtual fleet: chat is the rendered template tokenized, token ids stay one per id', () => {
    const vf = new VirtualFleet({ instances: 1, profile: 'tiny', tokenizer: 'o200k' })
    expect(vf.sim.tokenizer).toBe('o200k')
    const messages = [
      { role: 'system', content: 'You are terse.' },
      { role: 'user', content: 'Summarize:\n\nfirst point\nsecond point' },
    ]
    const chat = vf.prepare({ messages })
    expect(chat.promptTokens).toBe(direct(renderChat(messages, true)).length)
    const ids = Array.from({ length: 40 }, (_, i) => i * 1000)
    expect(vf.prepare({ tokenIds: ids }).promptTokens).toBe(40)
    expect(vf.prepare({ tokenIds: ids })).toEqual(new VirtualFleet({ instances: 1, profile: 'tiny' }).prepare({ tokenIds: ids }))
    expect(vf.prepare({ text: 'a b c' }).promptTokens).toBe(3)
  })

  it('is `bytes` by default and refuses other names', () => {
    expect(resolveSim().tokenizer).toBe('bytes')
    expect(() => resolveSim({ tokenizer: 'cl100k' as never })).toThrow(/tokenizer must be one of bytes, o200k; got "cl100k"/)
  })
})

describe('live workers under o200k', () => {
  const system = { role: 'system', content: 'You answer questions about the document.\n\n' + 'Clause 7.2: the tenant pays rent monthly. '.repeat(60) }

  it('report prompt_tokens as gpt-tokenizer counts the rendered prompt, and cache whole blocks of them', async () => {
    const { urls } = await fleet({ tokenizer: 'o200k' })
    const u = urls[0]!
    const messages = [system, { role: 'user', content: 'When is rent due?' }]
    const a = await post(u, '/v1/chat/completions', { messages, max_tokens: 2 })
    expect(a.status).toBe(200)
    expect(a.body.usage.prompt_tokens).toBe(direct(renderChat(messages, true)).length)
    expect(a.body.usage.prompt_tokens).not.toBe(Math.ceil(Buffer.byteLength(renderChat(messages, true)) / 4)) // not the bytes count
    const b = await post(u, '/v1/chat/completions', { messages, max_tokens: 2 })
    expect(b.body.usage.prompt_tokens).toBe(a.body.usage.prompt_tokens)
    const cached = b.body.usage.prompt_tokens_details.cached_tokens
    expect(cached).toBeGreaterThan(0)
    expect(cached % 16).toBe(0)
    const ids = Array.from({ length: 100 }, (_, i) => 1000 + i)
    const c = await post(u, '/v1/completions', { prompt: ids, max_tokens: 2 })
    expect(c.body.usage.prompt_tokens).toBe(100)
    const text = await post(u, '/v1/completions', { prompt: 'hello <|endoftext|> world', max_tokens: 2 })
    expect(text.status).toBe(200)
    expect(text.body.usage.prompt_tokens).toBe(direct('hello <|endoftext|> world').length)
  })

  it('agree with the virtual engine on tokens, cache hits and TTFTs', async () => {
    const { urls } = await fleet({ tokenizer: 'o200k' })
    const u = urls[0]!
    const turn1 = [system, { role: 'user', content: 'First question?' }]
    const turn2 = [...turn1, { role: 'assistant', content: fillerText(0, 3) }, { role: 'user', content: 'Second question?' }]
    const requests: { path: string; body: Record<string, unknown>; virtual: VirtualRequest }[] = [
      { path: '/v1/chat/completions', body: { messages: turn1, max_tokens: 3 }, virtual: { messages: turn1, maxTokens: 3 } },
      { path: '/v1/chat/completions', body: { messages: turn1, max_tokens: 3 }, virtual: { messages: turn1, maxTokens: 3 } },
      { path: '/v1/chat/completions', body: { messages: turn2, max_tokens: 3 }, virtual: { messages: turn2, maxTokens: 3 } },
      { path: '/v1/completions', body: { prompt: system.content, max_tokens: 3 }, virtual: { text: system.content, maxTokens: 3 } },
    ]
    const live: [number, number][] = []
    for (const r of requests) {
      const res = await post(u, r.path, r.body)
      live.push([res.body.usage.prompt_tokens, res.body.usage.prompt_tokens_details.cached_tokens])
    }
    const vf = new VirtualFleet({ instances: 1, profile: 'tiny', tokenizer: 'o200k' })
    const virtual: [number, number][] = []
    for (const r of requests) {
      vf.submit(0, r.virtual, { at: vf.now + 100, onFinish: (res) => virtual.push([res.promptTokens, res.cachedTokens]) })
      vf.run()
    }
    expect(live).toEqual(virtual)
    expect(virtual[2]![1]).toBeGreaterThan(0) // turn 2 hits turn 1's blocks
    const m = await scrape(u)
    const liveSum = metric(m, 'vllm:time_to_first_token_seconds_sum') * 1000
    const virtualSum = metric(parsePrometheus(vf.metrics(0)), 'vllm:time_to_first_token_seconds_sum') * 1000
    expect(Math.abs(liveSum - virtualSum)).toBeLessThan(0.01)
    expect(metric(m, 'vllm:prefix_cache_hits_total')).toBe(virtual.reduce((s, [, c]) => s + c, 0))
  })
})

describe('--tokenizer on the command line', () => {
  it('refuses a bad value in one line naming the flag, exit 2', () => {
    const r = spawnSync(process.execPath, [cli, 'sim', '--tokenizer', 'cl100k'], { encoding: 'utf8' })
    expect(r.status).toBe(2)
    expect(r.stderr).toMatch(/--tokenizer must be one of bytes, o200k; got 'cl100k'/)
    expect(r.stderr.trim().split('\n')).toHaveLength(1)
  })

  it('sim --tokenizer o200k serves o200k counts', async () => {
    const child = spawn(process.execPath, [cli, 'sim', '--port', '0', '--profile', 'tiny', '--tokenizer', 'o200k'], { stdio: ['ignore', 'pipe', 'pipe'] })
    try {
      let out = ''
      let err = ''
      child.stderr.on('data', (d: Buffer) => (err += d.toString()))
      const url = await new Promise<string>((resolve, reject) => {
        child.stdout.on('data', (d: Buffer) => {
          out += d.toString()
          const line = out.split('\n').find((l) => l.startsWith('http://'))
          if (line !== undefined) resolve(line)
        })
        child.once('exit', (code) => reject(new Error(`exited early with ${code}`)))
      })
      const messages = [{ role: 'user', content: 'Tokenize this sentence, please.' }]
      const r = await post(url, '/v1/chat/completions', { messages, max_tokens: 1 })
      expect(r.body.usage.prompt_tokens).toBe(direct(renderChat(messages, true)).length)
      expect(err).toMatch(/tokenizer o200k/)
    } finally {
      child.kill('SIGKILL')
    }
  })
})
