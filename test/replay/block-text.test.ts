import { encode } from 'gpt-tokenizer/encoding/o200k_base'
import { describe, expect, it } from 'vitest'
import { BLOCK_END, BlockTexts, blockText, MIN_BLOCK_TOKENS, tagBytes, TAG_WORDS, UNIT_BYTES, VOCABULARY } from '../../src/replay/block-text.js'
import { tokenCount } from '../../src/sim/tokenizer.js'

const bytesTokens = (s: string): number => tokenCount(Buffer.byteLength(s))

describe('block texts', () => {
  it('draws words that are each one o200k token with their leading space, and an end that is one too', () => {
    expect(new Set(VOCABULARY).size).toBe(256)
    for (const w of VOCABULARY) {
      expect(w, w).toMatch(/^[a-z]{3}$/)
      expect(encode(` ${w}`), w).toHaveLength(1)
    }
    expect(encode(BLOCK_END)).toHaveLength(1)
    // The "\n\n" stays with the "." and the next word keeps its own token.
    expect(encode(' the and .\n\n for')).toEqual([...encode(' the'), ...encode(' and'), ...encode(BLOCK_END), ...encode(' for')])
  })

  it('is exactly B tokens under both tokenizers, the same every time', () => {
    for (const b of [MIN_BLOCK_TOKENS, 9, 16, 100, 512, 2048]) {
      for (const id of [0, 1, 2, 12345, 2 ** 40 + 7, Number.MAX_SAFE_INTEGER]) {
        const t = blockText(id, b)
        expect(t).toHaveLength(b * UNIT_BYTES)
        expect(bytesTokens(t)).toBe(b)
        expect(encode(t)).toHaveLength(b)
        expect(t.endsWith(BLOCK_END)).toBe(true)
        expect(blockText(id, b)).toBe(t)
      }
    }
    // Pinned: a trace replays the same text in every version.
    expect(blockText(0, 16)).toBe(' eel for add lay den hid fad mud cap day pad may elf nor put .\n\n')
    expect(blockText(1, 16)).toBe(' pad gun did tab box fur tin rid can had fat hum rug day lay .\n\n')
    // A longer block of the same id extends the shorter one's words (one stream per id).
    expect(blockText(7, 512).slice(0, 60 * UNIT_BYTES)).toBe(blockText(7, 100).slice(0, 60 * UNIT_BYTES))
  })

  it('gives distinct ids distinct tags: no two blocks share their first tokens', () => {
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
    expect(blockText(5, 64).slice(0, 16 * UNIT_BYTES)).not.toBe(blockText(6, 64).slice(0, 16 * UNIT_BYTES))
  })

  it('builds prompts of exactly input_length tokens whose o200k tokens are the blocks’ tokens', () => {
    const texts = new BlockTexts(512)
    const cases: [number[], number][] = [
      [[0], 1],
      [[0], 512],
      [[0, 1], 513],
      [[0, 3, 9, 27], 3 * 512 + 200],
      [[0, ...Array.from({ length: 23 }, (_, i) => 1000 + i)], 12_001],
    ]
    for (const [ids, input] of cases) {
      const p = texts.prompt(ids, input)
      expect(p).toHaveLength(input * UNIT_BYTES)
      expect(bytesTokens(p)).toBe(input)
      const tokens = encode(p)
      expect(tokens).toHaveLength(input)
      const pieces = ids.map((id, i) => (i < ids.length - 1 ? blockText(id, 512) : blockText(id, 512).slice(0, (input - i * 512) * UNIT_BYTES)))
      expect(tokens).toEqual(pieces.flatMap((piece) => encode(piece)))
    }
  })

  it('keeps a bounded number of block texts', () => {
    const texts = new BlockTexts(512, 3 * 512 * UNIT_BYTES)
    for (let id = 0; id < 100; id++) texts.block(id)
    expect(texts.size).toBe(3)
    // Least recently used goes first: 97 is used again, so 98 is the one evicted by 100.
    for (const id of [97, 100, 97, 99, 100]) texts.block(id)
    expect(texts.held()).toEqual([97, 99, 100])
    expect(texts.block(95)).toBe(blockText(95, 512))
    expect(texts.held()).toEqual([99, 100, 95])
    expect(() => new BlockTexts(4)).toThrow(/at least 8 tokens/)
    expect(() => blockText(-1, 16)).toThrow(/non-negative safe integer/)
  })
})
