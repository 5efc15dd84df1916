// The KV-event codec against frames written out by hand from the MessagePack spec (what
// msgspec emits for vLLM's structs), both encodings, and against arbitrary bytes.
import fc from 'fast-check'
import { pack } from 'msgpackr'
import { describe, expect, it } from 'vitest'
import { decodeBatch, encodeBatch, KvEventDecodeError } from '../../../src/fleet/events/codec.js'
import type { BlockStoredEvent, KvEvent, KvEventBatch, KvEventEncoding } from '../../../src/fleet/events/types.js'

/** A fixstr (strings under 32 bytes): 0xa0 | length, then the UTF-8. */
const fixstr = (s: string): string => (0xa0 | s.length).toString(16) + Buffer.from(s).toString('hex')
const hex = (...parts: string[]): string => parts.join('')

const BIG = (1n << 63n) + 5n // above 2^53: must stay exact

const small: KvEventBatch = {
  ts: 1.5,
  events: [
    {
      type: 'BlockStored',
      blockHashes: [1n, BIG],
      parentBlockHash: null,
      tokenIds: [1, 2, 3, 4],
      blockSize: 2,
      loraId: null,
      medium: 'GPU',
      loraName: null,
      extraKeys: null,
      groupIdx: null,
    },
    { type: 'BlockRemoved', blockHashes: [1n], medium: 'GPU', groupIdx: null },
  ],
  dataParallelRank: 0,
}

// msgspec with omit_defaults: extra_keys and group_idx (default None) are left out; lora_id,
// medium and lora_name have no default and are written even when None. ts is a float64
// (0xcb), 1 a positive fixint, 2^63 + 5 a uint64 (0xcf), nil 0xc0.
const SMALL_MAP = hex(
  '83', // fixmap, 3 entries
  fixstr('ts'), 'cb3ff8000000000000',
  fixstr('events'), '92',
  '88', fixstr('type'), fixstr('BlockStored'),
  fixstr('block_hashes'), '92', '01', 'cf8000000000000005',
  fixstr('parent_block_hash'), 'c0',
  fixstr('token_ids'), '94', '01020304',
  fixstr('block_size'), '02',
  fixstr('lora_id'), 'c0',
  fixstr('medium'), fixstr('GPU'),
  fixstr('lora_name'), 'c0',
  '83', fixstr('type'), fixstr('BlockRemoved'), fixstr('block_hashes'), '91', '01', fixstr('medium'), fixstr('GPU'),
  fixstr('data_parallel_rank'), '00',
)

// array_like: the tag first, then fields by position; trailing defaults dropped.
const SMALL_ARRAY = hex(
  '93', 'cb3ff8000000000000',
  '92',
  '98', fixstr('BlockStored'), '92', '01', 'cf8000000000000005', 'c0', '94', '01020304', '02', 'c0', fixstr('GPU'), 'c0',
  '93', fixstr('BlockRemoved'), '91', '01', fixstr('GPU'),
  '00',
)

const bytesOf = (h: string): Uint8Array => new Uint8Array(Buffer.from(h, 'hex'))

describe('encodeBatch writes what vLLM writes', () => {
  it('map encoding, byte for byte', () => {
    expect(Buffer.from(encodeBatch(small, 'map')).toString('hex')).toBe(SMALL_MAP)
  })

  it('array encoding, byte for byte', () => {
    expect(Buffer.from(encodeBatch(small, 'array')).toString('hex')).toBe(SMALL_ARRAY)
  })

  it('a whole ts is still a float64, and a null rank is left out', () => {
    const b = encodeBatch({ ts: 2, events: [{ type: 'AllBlocksCleared' }], dataParallelRank: null }, 'map')
    expect(Buffer.from(b).toString('hex')).toBe(hex('82', fixstr('ts'), 'cb4000000000000000', fixstr('events'), '91', '81', fixstr('type'), fixstr('AllBlocksCleared')))
    const a = encodeBatch({ ts: 2, events: [{ type: 'AllBlocksCleared' }], dataParallelRank: null }, 'array')
    expect(Buffer.from(a).toString('hex')).toBe(hex('92', 'cb4000000000000000', '91', '91', fixstr('AllBlocksCleared')))
  })

  it('the array form keeps a None before a set trailing field; the map form leaves it out', () => {
    const ev: KvEvent = { ...(small.events[0] as Extract<KvEvent, { type: 'BlockStored' }>), blockHashes: [1n, 2n], groupIdx: 1 }
    const a = Buffer.from(encodeBatch({ ts: 0.5, events: [ev], dataParallelRank: null }, 'array')).toString('hex')
    expect(a).toBe(hex('92', 'cb3fe0000000000000', '91', '9a', fixstr('BlockStored'), '92', '0102', 'c0', '94', '01020304', '02', 'c0', fixstr('GPU'), 'c0', 'c0', '01'))
    const m = decodeBatch(encodeBatch({ ts: 0.5, events: [ev], dataParallelRank: null }, 'map'))
    expect(m.events[0]).toEqual(ev)
  })

  it('rejects an unknown encoding', () => {
    expect(() => encodeBatch(small, 'json' as KvEventEncoding)).toThrow(/'map' or 'array'/)
  })
})

describe('decodeBatch', () => {
  it('reads both hand-built frames back', () => {
    for (const h of [SMALL_MAP, SMALL_ARRAY]) {
      const d = decodeBatch(bytesOf(h))
      expect({ ts: d.ts, events: d.events, dataParallelRank: d.dataParallelRank }).toEqual(small)
      expect(d.skipped).toBe(0)
      expect(d.undecodable).toBe(0)
      expect((d.events[0] as { blockHashes: unknown[] }).blockHashes[1]).toBe(BIG)
    }
  })

  it('normalizes every integer hash to a bigint, small or 64-bit', () => {
    const d = decodeBatch(pack([1.0, [['BlockRemoved', [7, 2 ** 40, BIG], 'GPU']]]))
    expect((d.events[0] as { blockHashes: unknown[] }).blockHashes).toEqual([7n, 2n ** 40n, BIG])
  })

  it('keeps bytes hashes (sha256 hashers) as bytes', () => {
    const h = new Uint8Array(32).map((_, i) => i * 7)
    const ev: KvEvent = { type: 'BlockStored', blockHashes: [h], parentBlockHash: h, tokenIds: [9], blockSize: 1, loraId: 3, medium: 'CPU', loraName: 'ad', extraKeys: [['ad', 'salt']], groupIdx: 2 }
    for (const enc of ['map', 'array'] as const) {
      const bytes = encodeBatch({ ts: 3.25, events: [ev], dataParallelRank: 1 }, enc)
      expect(Buffer.from(bytes).includes(Buffer.concat([Buffer.from([0xc4, 32]), h]))).toBe(true) // bin8, 32 bytes
      const back = decodeBatch(bytes).events[0] as Extract<KvEvent, { type: 'BlockStored' }>
      expect(back).toEqual(ev)
      expect(back.blockHashes[0]).toBeInstanceOf(Uint8Array)
    }
  })

  it('fills missing trailing fields of older vLLM with null and ignores fields it does not know', () => {
    const old = decodeBatch(pack([1.0, [['BlockStored', [5], 4, [1, 2], 2, null], ['BlockRemoved', [5]]]]))
    expect(old.events).toEqual([
      { type: 'BlockStored', blockHashes: [5n], parentBlockHash: 4n, tokenIds: [1, 2], blockSize: 2, loraId: null, medium: null, loraName: null, extraKeys: null, groupIdx: null },
      { type: 'BlockRemoved', blockHashes: [5n], medium: null, groupIdx: null },
    ])
    const newer = decodeBatch(
      pack({
        ts: 1.0,
        events: [{ type: 'BlockRemoved', block_hashes: [5], medium: 'GPU', kv_cache_spec_kind: 'full', future: [1, 2] }],
        data_parallel_rank: 2,
        future_batch_field: 'x',
      }),
    )
    expect(newer.events).toEqual([{ type: 'BlockRemoved', blockHashes: [5n], medium: 'GPU', groupIdx: null }])
    expect(newer.dataParallelRank).toBe(2)
  })

  it('skips and counts unknown event types; counts malformed events; keeps the rest', () => {
    const d = decodeBatch(
      pack([
        1.0,
        [
          ['BlockMoved', [1]],
          { type: 'SomethingNew' },
          ['BlockRemoved', 'not a list', 'GPU'],
          ['BlockStored', [1], null, [1, 2, 3], 2, null, 'GPU', null], // 3 tokens for one block of 2
          42,
          ['AllBlocksCleared'],
        ],
      ]),
    )
    expect(d.events).toEqual([{ type: 'AllBlocksCleared' }])
    expect(d.skipped).toBe(2)
    expect(d.undecodable).toBe(3)
  })

  it('counts as malformed, not wraps or keeps, what the index cannot hold: no blocks, wrong token counts, block_size 0, negative ids, token ids past 2^32-1', () => {
    const stored = (o: Partial<BlockStoredEvent>): BlockStoredEvent => ({
      type: 'BlockStored',
      blockHashes: [1n],
      parentBlockHash: null,
      tokenIds: [7, 8],
      blockSize: 2,
      loraId: null,
      medium: 'GPU',
      loraName: null,
      extraKeys: null,
      groupIdx: null,
      ...o,
    })
    const bad = [
      stored({ blockHashes: [], tokenIds: [] }), // no blocks, no tokens
      stored({ tokenIds: [] }), // a block without its tokens
      stored({ tokenIds: [1, 2, 3] }), // tokens not block_size per block
      stored({ blockSize: 0, tokenIds: [] }),
      stored({ tokenIds: [-1, 2] }),
      stored({ loraId: -3 }),
      stored({ groupIdx: -1 }),
      stored({ tokenIds: [2 ** 32, 2] }), // would wrap to token 0
      stored({ tokenIds: [2 ** 40, 2] }),
    ]
    for (const enc of ['map', 'array'] as const) {
      const d = decodeBatch(encodeBatch({ ts: 1, events: [...bad, stored({ tokenIds: [2 ** 32 - 1, 0] })], dataParallelRank: null }, enc))
      expect(d.undecodable, enc).toBe(bad.length)
      expect(d.events, enc).toEqual([stored({ tokenIds: [2 ** 32 - 1, 0] })])
    }
  })

  it('throws KvEventDecodeError with a stable code for what is not a batch', () => {
    const cases: [Uint8Array, string][] = [
      [new Uint8Array(0), 'bad_msgpack'],
      [bytesOf(SMALL_MAP).subarray(0, 40), 'bad_msgpack'], // truncated
      [bytesOf('c1'), 'bad_msgpack'], // 0xc1 is never used
      [bytesOf(SMALL_ARRAY + '00'), 'bad_msgpack'], // a second value after the batch
      [pack('hello'), 'not_a_batch'],
      [pack(17), 'not_a_batch'],
      [pack({ ts: 'now', events: [] }), 'bad_batch_field'],
      [pack([1.0, 'events']), 'bad_batch_field'],
      [pack({ events: [] }), 'bad_batch_field'],
      [pack([1.0, [], 'rank']), 'bad_batch_field'],
    ]
    for (const [bytes, code] of cases) {
      let caught: unknown
      try {
        decodeBatch(bytes)
      } catch (err) {
        caught = err
      }
      expect(caught, Buffer.from(bytes).toString('hex')).toBeInstanceOf(KvEventDecodeError)
      expect((caught as KvEventDecodeError).code).toBe(code)
    }
  })

  it('every truncation of a valid frame throws KvEventDecodeError', () => {
    for (const h of [SMALL_MAP, SMALL_ARRAY]) {
      const b = bytesOf(h)
      for (let n = 0; n < b.length; n++) expect(() => decodeBatch(b.subarray(0, n))).toThrow(KvEventDecodeError)
    }
  })
})

const hashArb = fc.oneof(fc.bigInt({ min: 0n, max: (1n << 64n) - 1n }), fc.uint8Array({ minLength: 32, maxLength: 32 }))
const optStr = fc.option(fc.string({ maxLength: 40 }), { nil: null })
const optInt = fc.option(fc.nat(1000), { nil: null })
const storedArb = fc
  .record({ n: fc.integer({ min: 1, max: 4 }), bs: fc.integer({ min: 1, max: 4 }), withExtra: fc.boolean() })
  .chain(({ n, bs, withExtra }) =>
    fc.record({
      type: fc.constant('BlockStored' as const),
      blockHashes: fc.array(hashArb, { minLength: n, maxLength: n }),
      parentBlockHash: fc.option(hashArb, { nil: null }),
      tokenIds: fc.array(fc.nat(0xffffffff), { minLength: n * bs, maxLength: n * bs }),
      blockSize: fc.constant(bs),
      loraId: optInt,
      medium: optStr,
      loraName: optStr,
      extraKeys: withExtra ? fc.array(fc.option(fc.array(fc.string({ maxLength: 8 }), { maxLength: 3 }), { nil: null }), { minLength: n, maxLength: n }) : fc.constant(null),
      groupIdx: optInt,
    }),
  )
const removedArb = fc.record({
  type: fc.constant('BlockRemoved' as const),
  blockHashes: fc.array(hashArb, { maxLength: 5 }),
  medium: optStr,
  groupIdx: optInt,
})
const batchArb: fc.Arbitrary<KvEventBatch> = fc.record({
  ts: fc.double({ noNaN: true, noDefaultInfinity: true }),
  events: fc.array(fc.oneof(storedArb, removedArb, fc.constant({ type: 'AllBlocksCleared' as const })), { maxLength: 8 }),
  dataParallelRank: fc.option(fc.nat(64), { nil: null }),
})

describe('properties', () => {
  it('decodeBatch(encodeBatch(b)) is b, in both encodings', () => {
    fc.assert(
      fc.property(batchArb, fc.constantFrom<KvEventEncoding>('map', 'array'), (b, enc) => {
        const d = decodeBatch(encodeBatch(b, enc))
        expect({ ts: d.ts, events: d.events, dataParallelRank: d.dataParallelRank }).toEqual(b)
        expect(d.skipped + d.undecodable).toBe(0)
      }),
      { numRuns: 300 },
    )
  })

  it('on random bytes decodeBatch returns a batch or throws KvEventDecodeError, nothing else', () => {
    const prefixes = [0x82, 0x83, 0x92, 0x93, 0xd4, 0xd5, 0xc7, 0xdc, 0xde]
    fc.assert(
      fc.property(fc.uint8Array({ maxLength: 64 }), fc.option(fc.constantFrom(...prefixes), { nil: null }), (raw, head) => {
        const bytes = head === null ? raw : new Uint8Array([head, ...raw])
        try {
          const d = decodeBatch(bytes)
          expect(Array.isArray(d.events)).toBe(true)
        } catch (err) {
          expect(err).toBeInstanceOf(KvEventDecodeError)
        }
      }),
      { numRuns: 5000 },
    )
  })

  it('on valid frames with a byte flipped the same holds', () => {
    fc.assert(
      fc.property(batchArb, fc.nat(), fc.nat(255), (b, at, v) => {
        const bytes = encodeBatch(b, at % 2 === 0 ? 'map' : 'array')
        bytes[at % bytes.length] = v
        try {
          decodeBatch(bytes)
        } catch (err) {
          expect(err).toBeInstanceOf(KvEventDecodeError)
        }
      }),
      { numRuns: 1000 },
    )
  })
})
