// Tokenizer, chat template and block hashing: the properties the cache relies on.
import { describe, expect, it } from 'vitest'
import { xxh3 } from '../../src/core/hash.js'
import { blockKey, cacheSeed, hashBlocks, preparePrompt } from '../../src/sim/block-hash.js'
import { preparePromptText } from '../../src/sim/block-hash.js'
import { GENERATION_PROMPT, renderChat } from '../../src/tokens/chatml.js'
import { encodeTokenIds, fillerText, tokenCount } from '../../src/sim/tokenizer.js'

describe('tokenizer', () => {
  it('counts one token per 4 bytes of UTF-8, the last one possibly short', () => {
    expect(tokenCount(0)).toBe(0)
    expect(tokenCount(1)).toBe(1)
    expect(tokenCount(8)).toBe(2)
    expect(tokenCount(9)).toBe(3)
    expect(tokenCount(Buffer.byteLength('héllo wörld'))).toBe(4) // 13 bytes
    expect(encodeTokenIds([1, 2, 3]).length).toBe(12)
  })

  it('generates deterministic filler of 4-character tokens that continues across calls', () => {
    expect(fillerText(0, 3)).toBe('Lorem ipsum ')
    expect(fillerText(0, 100)).toBe(fillerText(0, 60) + fillerText(60, 40))
    expect(fillerText(0, 100)).toHaveLength(400)
    expect(fillerText(0, 500)).not.toMatch(/["\\\n]/)
  })
})

describe('chat template', () => {
  it('renders turn k as a prefix of turn k+1', () => {
    const t1 = [
      { role: 'system', content: 'Be brief.' },
      { role: 'user', content: 'Hi' },
    ]
    const t2 = [...t1, { role: 'assistant', content: 'Hello!' }, { role: 'user', content: 'Bye' }]
    const r1 = renderChat(t1)
    const r2 = renderChat(t2)
    expect(r1.endsWith(GENERATION_PROMPT)).toBe(true)
    expect(r2.startsWith(r1)).toBe(true)
    expect(renderChat(t1, false).endsWith(GENERATION_PROMPT)).toBe(false)
  })
})

describe('block hashes', () => {
  it('chains XXH3 over full blocks of block_size * 4 bytes, seeded by model and salt', () => {
    const bytes = Buffer.from('a'.repeat(64 * 3 + 10))
    const seed = cacheSeed('m')
    const h = hashBlocks(bytes, 16, seed)
    expect(h).toHaveLength(3)
    expect(h[0]).toBe(xxh3(bytes.subarray(0, 64), seed))
    expect(h[1]).toBe(xxh3(bytes.subarray(64, 128), h[0]))
    expect(h[2]).toBe(xxh3(bytes.subarray(128, 192), h[1]))
    const p = preparePrompt(bytes, 16, seed)
    expect(p.promptTokens).toBe(51)
    expect([...p.blockKeys]).toEqual(h.map(blockKey))
    expect(preparePromptText(bytes.toString(), 16, seed)).toEqual(p)
    // the same block content at the same position but after a different prefix has another key
    const other = preparePrompt(Buffer.from('b'.repeat(64) + 'a'.repeat(128)), 16, seed)
    expect(other.blockKeys[1]).not.toBe(p.blockKeys[1])
    expect(cacheSeed('m', 'salt')).not.toBe(seed)
    expect(cacheSeed('lora')).not.toBe(seed)
  })

  it('hashes non-ASCII text as its UTF-8 bytes whichever path prepares it', () => {
    const text = 'プレフィックス・キャッシュ '.repeat(40)
    const seed = cacheSeed('m')
    expect(preparePromptText(text, 16, seed)).toEqual(preparePrompt(Buffer.from(text), 16, seed))
    // and the scratch buffer grows for a long prompt, then still agrees for a short one
    const long = 'x'.repeat(200_000)
    expect(preparePromptText(long, 16, seed)).toEqual(preparePrompt(Buffer.from(long), 16, seed))
    expect(preparePromptText('short'.repeat(30), 16, seed)).toEqual(preparePrompt(Buffer.from('short'.repeat(30)), 16, seed))
  })
})
