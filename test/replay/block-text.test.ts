import { decode, encode } from 'gpt-tokenizer/encoding/o200k_base'
import { describe, expect, it } from 'vitest'
import {
  BLOCK_END,
  BlockTexts,
  blockText,
  BYTES_PER_TOKEN,
  cutBlock,
  MAX_TAG_BYTES,
  MIN_BLOCK_TOKENS,
  TAG_VOCABULARY,
  tagBytes,
  TAG_WORDS,
  VOCABULARY,
} from '../../src/replay/block-text.js'
import { tokenCount } from '../../src/sim/tokenizer.js'
import { getTokenizer, TOKENIZERS, type TokenizerName } from '../../src/sim/tokenizers/index.js'

const bytesTokens = (s: string): number => tokenCount(Buffer.byteLength(s))
const count = (s: string, tokenizer: TokenizerName): number => (tokenizer === 'o200k' ? encode(s).length : bytesTokens(s))
const IDS = [0, 1, 2, 12345, 2 ** 40 + 7, Number.MAX_SAFE_INTEGER]

describe('block texts', () => {
  it('draws words of varied lengths that are each one o200k token with their leading space, and an end that is one too', () => {
    expect(VOCABULARY).toHaveLength(1024)
    expect(new Set(VOCABULARY).size).toBe(1024)
    for (const w of VOCABULARY) {
      expect(w, w).toMatch(/^[a-z]+$/)
      expect(encode(` ${w}`), w).toHaveLength(1)
    }
    expect(TAG_VOCABULARY).toEqual(VOCABULARY.slice(0, 256))
    for (const w of TAG_VOCABULARY) expect(w, w).toMatch(/^[a-z]{1,3}$/)
    expect(TAG_WORDS * Math.max(...TAG_VOCABULARY.map((w) => w.length + 1))).toBe(MAX_TAG_BYTES)
    // Lengths spread over most of a 64-byte block, so 16-token blocks end at every byte offset.
    const bytes = VOCABULARY.map((w) => w.length + 1)
    const mean = bytes.reduce((a, b) => a + b, 0) / bytes.length
    expect(mean).toBeGreaterThan(6)
    expect(mean).toBeLessThan(7)
    expect(new Set(bytes).size).toBeGreaterThanOrEqual(8)
    expect(Math.min(...bytes)).toBe(2)
    expect(Math.max(...bytes)).toBeGreaterThanOrEqual(12)
    expect(encode(BLOCK_END)).toHaveLength(1)
    // The "\n\n" stays with the "." and the next word keeps its own token.
    const words = [' a', ' the', ' report', ' throughput', BLOCK_END, ' configuration', ' of']
    expect(encode(words.join(''))).toEqual(words.flatMap((w) => encode(w)))
  })

  it('is exactly B tokens under each tokenizer, the same every time', () => {
    for (const b of [MIN_BLOCK_TOKENS, 9, 16, 100, 512, 2048]) {
      for (const id of IDS) {
        const bytes = blockText(id, b, 'bytes')
        expect(bytes).toHaveLength(b * BYTES_PER_TOKEN)
        expect(bytesTokens(bytes)).toBe(b)
        const o200k = blockText(id, b, 'o200k')
        expect(o200k.slice(0, -BLOCK_END.length)).toMatch(/^( [a-z]+)+$/)
        expect(bytes.slice(0, -BLOCK_END.length)).toMatch(/^ [ a-z]+$/)
        expect(encode(o200k)).toHaveLength(b)
        for (const t of [bytes, o200k]) expect(t.endsWith(BLOCK_END)).toBe(true)
        expect(blockText(id, b, 'bytes')).toBe(bytes)
        expect(blockText(id, b, 'o200k')).toBe(o200k)
      }
    }
    // Pinned: a trace replays the same text in every version.
    expect(blockText(0, 16, 'o200k')).toBe(' zip to was cut tug tip bee great boy interest main jet query above project .\n\n')
    expect(blockText(0, 16, 'bytes')).toBe(' zip to was cut tug tip bee great boy interest main jet quer .\n\n')
    expect(blockText(1, 16, 'o200k')).toBe(' gap bar are owl see sun paw team handle eye structure him turn client level .\n\n')
    // One stream of words per id: a longer block extends a shorter one, under either tokenizer.
    const stream = blockText(7, 2048, 'o200k')
    expect(stream.startsWith(blockText(7, 100, 'o200k').slice(0, -BLOCK_END.length))).toBe(true)
    expect(stream.startsWith(blockText(7, 512, 'bytes').slice(0, -BLOCK_END.length))).toBe(true)
  })

  it('gives distinct ids distinct tags: no two blocks share their first 28 bytes', () => {
    const seen = new Set<string>()
    const ids = [...Array.from({ length: 20_000 }, (_, i) => i), 2 ** 28 - 1, 2 ** 28, 2 ** 32, 2 ** 52, Number.MAX_SAFE_INTEGER]
    let malformed = 0
    for (const id of ids) {
      const tag = tagBytes(id)
      if (tag.length !== TAG_WORDS || tag.some((b) => !Number.isInteger(b) || b < 0 || b > 255)) malformed++
      seen.add(tag.join(','))
    }
    expect(malformed).toBe(0)
    expect(seen.size).toBe(ids.length)
    // Neighbouring ids do not even share their first word often (1 in 256 by chance).
    let sameFirst = 0
    for (let id = 0; id < 10_000; id++) if (tagBytes(id)[0] === tagBytes(id + 1)[0]) sameFirst++
    expect(sameFirst).toBeLessThan(100)
    // Words of different lengths still keep the tags apart in the text, and early: within the
    // smallest `bytes` block, and so within the router's first 64 bytes.
    for (const tokenizer of TOKENIZERS) {
      const starts = new Set(ids.map((id) => blockText(id, MIN_BLOCK_TOKENS, tokenizer).slice(0, MAX_TAG_BYTES)))
      expect(starts.size, tokenizer).toBe(ids.length)
    }
  })

  it('builds prompts of exactly input_length tokens whose o200k tokens are the blocks’ tokens', () => {
    const cases: [number[], number][] = [
      [[0], 1],
      [[0], 7],
      [[0], 511],
      [[0], 512],
      [[0, 1], 513],
      [[0, 3, 9, 27], 3 * 512 + 200],
      [[0, ...Array.from({ length: 23 }, (_, i) => 1000 + i)], 12_001],
    ]
    for (const tokenizer of TOKENIZERS) {
      const texts = new BlockTexts(512, tokenizer)
      const own = getTokenizer(tokenizer)
      for (const [ids, input] of cases) {
        const p = texts.prompt(ids, input)
        expect(count(p, tokenizer), `${tokenizer} ${input}`).toBe(input)
        expect(own.prepareText(p, 16, 0n).promptTokens, `${tokenizer} ${input}`).toBe(input)
        // The last block is cut to a prefix of itself: content shared by ids stays shared.
        const pieces = ids.map((id, i) => {
          const full = blockText(id, 512, tokenizer)
          const cut = i < ids.length - 1 ? full : cutBlock(full, input - i * 512, tokenizer)
          expect(full.startsWith(cut)).toBe(true)
          return cut
        })
        expect(p).toBe(pieces.join(''))
        if (tokenizer === 'bytes') expect(p).toHaveLength(input * BYTES_PER_TOKEN)
        else expect(encode(p)).toEqual(pieces.flatMap((piece) => encode(piece)))
      }
    }
    // A cut o200k block is its first k tokens.
    const full = blockText(42, 512, 'o200k')
    for (const k of [1, 6, 7, 8, 100, 511]) expect(encode(cutBlock(full, k, 'o200k'))).toEqual(encode(full).slice(0, k))
  })

  it('puts o200k’s 16-token blocks off the router’s 64-byte grid, and bytes’ on it', () => {
    const offsets = (prompt: string, tokenizer: TokenizerName): number[] => {
      if (tokenizer === 'bytes') return Array.from({ length: Math.floor(prompt.length / 64) }, (_, i) => 64 * (i + 1))
      const out: number[] = []
      let at = 0
      for (const [i, t] of encode(prompt).entries()) {
        at += Buffer.byteLength(decode([t]))
        if ((i + 1) % 16 === 0) out.push(at)
      }
      return out
    }
    for (const tokenizer of TOKENIZERS) {
      const texts = new BlockTexts(512, tokenizer)
      let boundaries = 0
      let onGrid = 0
      for (let r = 0; r < 20; r++) {
        const input = 600 + 97 * r
        const ids = Array.from({ length: Math.ceil(input / 512) }, (_, i) => (i === 0 ? 0 : 1000 * r + i))
        const prompt = texts.prompt(ids, input)
        const o = offsets(prompt, tokenizer)
        expect(o).toHaveLength(Math.floor(input / 16))
        boundaries += o.length
        onGrid += o.filter((x) => x % 64 === 0).length
      }
      if (tokenizer === 'bytes') expect(onGrid).toBe(boundaries)
      // By chance 1 in 64 would fall on it.
      else expect(onGrid / boundaries).toBeLessThan(0.05)
    }
  })

  it('keeps a bounded amount of block text', () => {
    const texts = new BlockTexts(512, 'bytes', 3 * 512 * BYTES_PER_TOKEN)
    for (let id = 0; id < 100; id++) texts.block(id)
    expect(texts.size).toBe(3)
    // Least recently used goes first: 97 is used again, so 98 is the one evicted by 100.
    for (const id of [97, 100, 97, 99, 100]) texts.block(id)
    expect(texts.held()).toEqual([97, 99, 100])
    expect(texts.block(95)).toBe(blockText(95, 512, 'bytes'))
    expect(texts.held()).toEqual([99, 100, 95])
    // o200k's blocks vary in length: the budget is in characters.
    const o200k = new BlockTexts(512, 'o200k', 20_000)
    for (let id = 0; id < 100; id++) o200k.block(id)
    const held = o200k.held()
    expect(held.at(-1)).toBe(99)
    const chars = held.reduce((n, id) => n + blockText(id, 512, 'o200k').length, 0)
    expect(chars).toBeLessThanOrEqual(20_000)
    expect(chars + blockText(held[0]! - 1, 512, 'o200k').length).toBeGreaterThan(20_000)
    expect(() => new BlockTexts(4, 'bytes')).toThrow(/at least 8 tokens/)
    expect(() => blockText(-1, 16, 'bytes')).toThrow(/non-negative safe integer/)
  })
})
