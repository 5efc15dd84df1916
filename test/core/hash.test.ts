// xxh3 against the reference: xxhsum -H3 (Debian's xxhash) for unseeded input of every
// length to 4 KiB and some large sizes, and committed vectors from libxxhash-dev for seeds.
import { execFileSync } from 'node:child_process'
import { mkdtempSync, readFileSync, rmSync, writeFileSync } from 'node:fs'
import { tmpdir } from 'node:os'
import { join } from 'node:path'
import { randomBytes } from 'node:crypto'
import { afterAll, beforeAll, describe, expect, it } from 'vitest'
import { xxh3 } from '../../src/core/hash.js'
import { native } from '../../src/core/native.js'
import { buildInfo } from '../../src/core/build-info.js'

const hex = (h: bigint) => h.toString(16).padStart(16, '0')

/** xxhsum -H3 over many files in one call: name -> hash. */
function xxhsum(files: string[]): Map<string, string> {
  const out = execFileSync('xxhsum', ['-H3', ...files], { encoding: 'utf8', maxBuffer: 64 << 20 })
  const map = new Map<string, string>()
  for (const line of out.trim().split('\n')) {
    const m = /^XXH3 \((.*)\) = ([0-9a-f]{16})$/.exec(line)
    if (m) map.set(m[1]!, m[2]!)
  }
  return map
}

function lcgBytes(n: number): Uint8Array {
  const b = new Uint8Array(n)
  let x = 0x12345678
  for (let i = 0; i < n; i++) {
    x = (Math.imul(x, 1664525) + 1013904223) >>> 0
    b[i] = x >>> 24
  }
  return b
}

describe('xxh3 against xxhsum -H3', () => {
  let dir: string
  beforeAll(() => {
    dir = mkdtempSync(join(tmpdir(), 'pr-xxh3-'))
  })
  afterAll(() => rmSync(dir, { recursive: true, force: true }))

  for (const kind of ['random', 'zero'] as const) {
    it(`every length 0..4096, ${kind} content`, () => {
      const source = kind === 'random' ? randomBytes(4096) : new Uint8Array(4096)
      const files: string[] = []
      for (let len = 0; len <= 4096; len++) {
        const f = join(dir, `${kind}-${len}`)
        writeFileSync(f, source.subarray(0, len))
        files.push(f)
      }
      const ref = xxhsum(files)
      expect(ref.size).toBe(4097)
      const mismatches: number[] = []
      for (let len = 0; len <= 4096; len++) {
        if (hex(xxh3(source.subarray(0, len))) !== ref.get(files[len]!)) mismatches.push(len)
      }
      expect(mismatches).toEqual([])
    })
  }

  it('large inputs: 64 KiB, 1 MiB, 10 MiB, random and zero', () => {
    const files: string[] = []
    const data: Uint8Array[] = []
    for (const size of [64 << 10, 1 << 20, 10 << 20]) {
      for (const buf of [randomBytes(size), new Uint8Array(size)]) {
        const f = join(dir, `large-${files.length}`)
        writeFileSync(f, buf)
        files.push(f)
        data.push(buf)
      }
    }
    const ref = xxhsum(files)
    files.forEach((f, i) => expect(hex(xxh3(data[i]!)), f).toBe(ref.get(f)))
  })

  it('hashes a string as its UTF-8 bytes', () => {
    for (const s of ['', 'abc', 'héllo wörld', '日本語のテキスト', 'emoji 🚀 and lone \ud800 surrogate', 'x'.repeat(5000)]) {
      expect(xxh3(s)).toBe(xxh3(Buffer.from(s, 'utf8')))
    }
    const f = join(dir, 'utf8')
    writeFileSync(f, 'héllo wörld')
    expect(hex(xxh3('héllo wörld'))).toBe(xxhsum([f]).get(f))
  })

  it('reads a typed array view in place (offset and length respected)', () => {
    const big = randomBytes(1000)
    const view = new Uint8Array(big.buffer, big.byteOffset + 100, 300)
    expect(xxh3(view)).toBe(xxh3(Buffer.from(big.subarray(100, 400))))
  })
})

describe('seeded xxh3 against libxxhash vectors', () => {
  const file = JSON.parse(readFileSync(new URL('../vectors/xxh3-seeded.json', import.meta.url), 'utf8')) as {
    vectors: { len: number; seed: string; hash: string }[]
  }
  const data = lcgBytes(1 << 20)

  it(`matches all ${file.vectors.length} vectors`, () => {
    expect(file.vectors.length).toBeGreaterThan(1000)
    const bad = file.vectors.filter((v) => hex(xxh3(data.subarray(0, v.len), BigInt(v.seed))) !== v.hash)
    expect(bad).toEqual([])
  })

  it('every SIMD path this CPU supports agrees with the vectors', () => {
    const paths = buildInfo().simdSupported.map((n) => ['scalar', 'sse2', 'avx2', 'neon'].indexOf(n))
    expect(paths).toContain(0)
    for (const p of paths) {
      const bad = file.vectors.filter((v) => hex(native.xxh3_path(p, data.subarray(0, v.len), BigInt(v.seed))) !== v.hash)
      expect(bad, `path ${p}`).toEqual([])
    }
  })
})

describe('xxh3 arguments', () => {
  it('rejects what is not bytes or text, naming the argument', () => {
    expect(() => xxh3(123 as unknown as string)).toThrow(TypeError)
    expect(() => xxh3(123 as unknown as string)).toThrow(/data must be a Uint8Array or a string/)
    expect(() => xxh3([1, 2] as unknown as Uint8Array)).toThrow(/data/)
  })
  it('rejects seeds outside 64 bits', () => {
    expect(() => xxh3('a', -1n)).toThrow(RangeError)
    expect(() => xxh3('a', 1n << 64n)).toThrow(/seed must be from 0n to 2n \*\* 64n - 1n/)
    expect(() => xxh3('a', 5 as unknown as bigint)).toThrow(TypeError)
    expect(xxh3('a', (1n << 64n) - 1n)).toBeTypeOf('bigint')
  })
})
