// The native key extraction against the TypeScript reference (openAIRequest + the string
// pick's UTF-8 conversion): generated chat and completions bodies in every JSON spelling
// (whitespace, key order, duplicates, every escape, astral characters, lone surrogates,
// lengths around the span and the cap), then mutated. Native ok must mean TS accepts with the
// same key material and the same pick; native invalid must mean TS rejects.
import fc from 'fast-check'
import { describe, expect, it } from 'vitest'
import { RequestError } from '../../src/core/errors.js'
import { xxh3 } from '../../src/core/hash.js'
import { keyHash } from '../../src/core/key/key-hash.js'
import { ExtractedKey, keyBinding, nativeRequest, type NativeOutcome } from '../../src/core/key/native-key.js'
import { native, type NativeHandle } from '../../src/core/native.js'
import { openAIRequest, type OpenAIRequest } from '../../src/core/key/openai-key.js'
import { tenantOf } from '../../src/core/key/tenant.js'
import { textSpan } from '../../src/core/key/index.js'
import { Router } from '../../src/core/router.js'
import { ProxyError } from '../../src/request/errors.js'
import { ParsePool } from '../../src/request/parse-pool.js'

// ---- a JSON value model, written out in randomly chosen but equivalent spellings ----------

type J = { obj: [string, J][] } | { arr: J[] } | { str: string } | { raw: string }

const str = (s: string): J => ({ str: s })
const obj = (...m: [string, J][]): J => ({ obj: m })

// A small seeded generator for spelling choices, so one fast-check seed replays a whole body.
function rng(seed: number): () => number {
  let a = seed >>> 0
  return () => {
    a = (a + 0x6d2b79f5) >>> 0
    let t = a
    t = Math.imul(t ^ (t >>> 15), t | 1)
    t ^= t + Math.imul(t ^ (t >>> 7), t | 61)
    return ((t ^ (t >>> 14)) >>> 0) / 4294967296
  }
}

const WS = [' ', '\n', '\t', '\r', '  \n    ']
const SHORT: Record<string, string> = { '"': '\\"', '\\': '\\\\', '/': '\\/', '\b': '\\b', '\f': '\\f', '\n': '\\n', '\r': '\\r', '\t': '\\t' }

function hex4(u: number, r: () => number): string {
  const h = u.toString(16).padStart(4, '0')
  return `\\u${r() < 0.5 ? h : h.toUpperCase()}`
}

function writeString(s: string, r: () => number): string {
  let out = '"'
  for (let i = 0; i < s.length; i++) {
    const u = s.charCodeAt(i)
    const pair = u >= 0xd800 && u <= 0xdbff && i + 1 < s.length && s.charCodeAt(i + 1) >= 0xdc00 && s.charCodeAt(i + 1) <= 0xdfff
    if (pair) {
      out += r() < 0.5 ? s.slice(i, i + 2) : hex4(u, r) + hex4(s.charCodeAt(i + 1), r)
      i++
    } else if (u >= 0xd800 && u <= 0xdfff) {
      out += hex4(u, r) // a lone surrogate has no UTF-8 spelling
    } else if (SHORT[s[i]!] !== undefined && (s[i] !== '/' || r() < 0.5)) {
      out += r() < 0.7 ? SHORT[s[i]!] : hex4(u, r)
    } else if (u < 0x20) {
      out += hex4(u, r)
    } else {
      out += r() < 0.1 ? hex4(u, r) : s[i]
    }
  }
  return `${out}"`
}

function write(v: J, r: () => number): string {
  const ws = () => (r() < 0.2 ? WS[Math.floor(r() * WS.length)]! : '')
  if ('str' in v) return writeString(v.str, r)
  if ('raw' in v) return v.raw
  if ('arr' in v) return `[${ws()}${v.arr.map((x) => `${ws()}${write(x, r)}${ws()}`).join(',')}]`
  const members = v.obj.map(([k, x]) => `${ws()}${writeString(k, r)}${ws()}:${ws()}${write(x, r)}${ws()}`)
  return `${ws()}{${members.join(',')}}${ws()}`
}

// Same members in another order, the last of each duplicate kept last (it is the one that counts).
function shuffle(m: [string, J][], r: () => number): [string, J][] {
  const firsts = m.filter(([k], i) => m.findLastIndex(([k2]) => k2 === k) !== i)
  const lasts = m.filter(([k], i) => m.findLastIndex(([k2]) => k2 === k) === i)
  for (let i = lasts.length - 1; i > 0; i--) {
    const j = Math.floor(r() * (i + 1))
    ;[lasts[i], lasts[j]] = [lasts[j]!, lasts[i]!]
  }
  return [...firsts, ...lasts]
}

// ---- generators ---------------------------------------------------------------------------

const unit = fc.oneof(
  { weight: 6, arbitrary: fc.constantFrom('a', 'b', ' ', 'Z', '0', '.', '/') },
  { weight: 2, arbitrary: fc.constantFrom('"', '\\', '\n', '\t', '\b', '\f', '\r', '\u0001', '\u001f', '\u007f') },
  { weight: 2, arbitrary: fc.constantFrom('é', 'ß', '€', '中', '\u241e', '\u241f', '\ufffd', '\u0800', '\uffff') },
  { weight: 2, arbitrary: fc.constantFrom('😀', '𝄞', '\u{10ffff}', '\u{10000}') },
  { weight: 1, arbitrary: fc.constantFrom('\ud800', '\udbff', '\udc00', '\udfff', '\ud83d', '\ude00') },
)
const text = fc.oneof(
  { weight: 4, arbitrary: fc.array(unit, { maxLength: 12 }).map((a) => a.join('')) },
  // Long enough to reach the span (and the cap, 2×span units) of the routers below.
  { weight: 1, arbitrary: fc.tuple(fc.array(unit, { minLength: 1, maxLength: 4 }), fc.integer({ min: 100, max: 800 })).map(([a, n]) => a.join('').repeat(n)) },
)

const junk: fc.Arbitrary<J> = fc.constantFrom<J>({ raw: '5' }, { raw: '-0.5e-3' }, { raw: 'null' }, { raw: 'true' }, { raw: '{}' }, { raw: '[1,[2]]' }, str('x'))

const part: fc.Arbitrary<J> = fc.oneof(
  { weight: 4, arbitrary: text.map((t) => obj(['type', str('text')], ['text', str(t)])) },
  { weight: 2, arbitrary: fc.tuple(text, fc.boolean()).map(([u, asString]) => obj(['type', str('image_url')], ['image_url', asString ? str(u) : obj(['detail', str('low')], ['url', str(u)])])) },
  { weight: 1, arbitrary: junk.map((x) => obj(['type', str('image_url')], ['image_url', x])) },
  { weight: 1, arbitrary: fc.tuple(junk, text).map(([x, t]) => obj(['text', x], ['type', str(t)])) },
  { weight: 1, arbitrary: junk },
)

const content: fc.Arbitrary<J | undefined> = fc.oneof(
  { weight: 5, arbitrary: text.map(str) },
  { weight: 3, arbitrary: fc.array(part, { maxLength: 4 }).map((arr): J => ({ arr })) },
  { weight: 1, arbitrary: fc.constantFrom<J | undefined>(undefined, { raw: 'null' }) },
  { weight: 1, arbitrary: fc.constantFrom<J>({ raw: '5' }, { raw: '{}' }, { raw: 'false' }) }, // refused
)

const role = fc.oneof({ weight: 8, arbitrary: fc.constantFrom('user', 'system', 'assistant').map(str) }, { weight: 1, arbitrary: text.map(str) }, { weight: 1, arbitrary: junk })

const message: fc.Arbitrary<J> = fc.oneof(
  { weight: 12, arbitrary: fc.tuple(role, content, fc.option(junk)).map(([r, c, decoy]): J => {
      const m: [string, J][] = decoy ? [['role', decoy]] : []
      m.push(['role', r])
      if (c) m.push(['content', c])
      return { obj: m }
    }) },
  { weight: 1, arbitrary: junk },
)

const top = fc.record({
  model: fc.option(fc.oneof({ weight: 5, arbitrary: text.map(str) }, { weight: 1, arbitrary: junk }), { nil: undefined }),
  cacheKey: fc.option(fc.oneof({ weight: 5, arbitrary: fc.constantFrom('k1', 'tenant-a', 'with space', '').map(str) }, { weight: 1, arbitrary: text.map(str) }, { weight: 1, arbitrary: junk }), { nil: undefined }),
  stream: fc.option(fc.constantFrom<J>({ raw: 'true' }, { raw: 'false' }, str('true'), { raw: '1' }), { nil: undefined }),
  extra: fc.array(fc.tuple(fc.constantFrom('temperature', 'max_tokens', 'n', 'user', '__proto__'), junk), { maxLength: 3 }),
  // Earlier members of the same name, which JSON.parse overwrites.
  decoys: fc.array(fc.tuple(fc.constantFrom('model', 'stream', 'messages', 'prompt', 'prompt_cache_key'), junk), { maxLength: 2 }),
})

type Top = typeof top extends fc.Arbitrary<infer T> ? T : never

function members(t: Top, body: [string, J][]): [string, J][] {
  const m: [string, J][] = [...t.decoys, ...t.extra]
  if (t.model) m.push(['model', t.model])
  if (t.cacheKey) m.push(['prompt_cache_key', t.cacheKey])
  if (t.stream) m.push(['stream', t.stream])
  return [...m, ...body]
}

const chatBody = fc.tuple(top, fc.array(message, { maxLength: 6 }), fc.integer()).map(([t, msgs, seed]) => {
  const r = rng(seed)
  return Buffer.from(write({ obj: shuffle(members(t, [['messages', { arr: msgs }]]), r) }, r))
})

const promptValue: fc.Arbitrary<J> = fc.oneof(
  { weight: 5, arbitrary: text.map(str) },
  { weight: 3, arbitrary: fc.array(text, { minLength: 1, maxLength: 3 }).map((a): J => ({ arr: a.map(str) })) },
  { weight: 1, arbitrary: fc.constantFrom<J>({ raw: '[1,2,3]' }, { raw: '[[1,2]]' }, { raw: '[]' }, { raw: '[null]' }, { raw: '7' }, { raw: 'null' }) },
)
const completionsBody = fc.tuple(top, promptValue, fc.integer()).map(([t, p, seed]) => {
  const r = rng(seed)
  return Buffer.from(write({ obj: shuffle(members(t, [['prompt', p]]), r) }, r))
})

// Truncations, byte flips, insertions and deletions: mostly syntax errors and bad UTF-8.
const mutated = (body: fc.Arbitrary<Buffer>) =>
  fc.tuple(body, fc.array(fc.tuple(fc.nat(), fc.integer({ min: 0, max: 255 }), fc.integer({ min: 0, max: 3 })), { minLength: 1, maxLength: 3 })).map(([b, edits]) => {
    let out = b
    for (const [at, byte, kind] of edits) {
      const i = out.length === 0 ? 0 : at % out.length
      if (kind === 0) out = out.subarray(0, i)
      else if (kind === 1 && out.length > 0) (out = Buffer.from(out))[i] = byte
      else if (kind === 2) out = Buffer.concat([out.subarray(0, i), Buffer.of(byte), out.subarray(i)])
      else out = Buffer.concat([out.subarray(0, i), out.subarray(i + 1)])
    }
    return out
  })

// ---- the reference: what the string path hands the router --------------------------------

/** The UTF-8 the router hashes for a string: its first n code points, a lone surrogate as U+FFFD. */
function utf8Prefix(s: string, n: number): Buffer {
  return Buffer.from([...s].slice(0, n).join(''))
}

function reference(api: 'chat' | 'completions', raw: Buffer, span: number): OpenAIRequest | RequestError {
  try {
    return openAIRequest(api, raw, span)
  } catch (err) {
    if (err instanceof RequestError) return err
    throw err
  }
}

function compare(api: 'chat' | 'completions', raw: Buffer, span: number, prefix: number): NativeOutcome {
  const got = nativeRequest(api, raw, { span, prefixLength: prefix, maxDepth: 64 })
  const want = reference(api, raw, span)
  if (got.status === 'invalid') expect(want).toBeInstanceOf(RequestError)
  if (got.status !== 'ok') return got
  expect(want).not.toBeInstanceOf(RequestError)
  const r = want as OpenAIRequest
  const k = got.request.key
  expect(Buffer.from(k)).toEqual(utf8Prefix(r.text, span))
  expect(k.keyBytes).toBe(utf8Prefix(r.text, prefix).length)
  if (r.anchor === undefined) expect(k.anchorBytes).toBeUndefined()
  else expect(k.anchorBytes).toBe(Math.min(Buffer.byteLength(r.text.slice(0, r.anchor)), k.length))
  expect(got.request.model).toBe(r.model)
  expect(got.request.promptCacheKey).toBe(r.promptCacheKey)
  expect(got.request.stream).toBe(r.stream)
  return got
}

describe('native key extraction matches openAIRequest', () => {
  const spans = fc.tuple(fc.integer({ min: 1, max: 40 }), fc.integer({ min: 1, max: 40 })).map(([a, b]) => ({ span: Math.max(a, b), prefix: Math.min(a, b) }))

  it('chat bodies: same text, marks, model, prompt_cache_key and stream; a shape TS refuses is refused', () => {
    let ok = 0
    fc.assert(
      fc.property(chatBody, spans, (raw, { span, prefix }) => {
        const got = compare('chat', raw, span, prefix)
        if (got.status === 'ok') ok++
        // Every generated body is valid JSON in valid UTF-8: the native side takes them all.
        expect(got.status).not.toBe('unsupported')
      }),
      { numRuns: 400 },
    )
    expect(ok).toBeGreaterThan(100)
  })

  it('completions bodies, token ids left to TypeScript', () => {
    fc.assert(
      fc.property(completionsBody, spans, (raw, { span, prefix }) => {
        const got = compare('completions', raw, span, prefix)
        if (got.status === 'unsupported') {
          const p = (JSON.parse(raw.toString()) as { prompt?: unknown }).prompt
          expect(Array.isArray(p) && (typeof p[0] === 'number' || Array.isArray(p[0]))).toBe(true)
        }
      }),
      { numRuns: 300 },
    )
  })

  it('mutated bodies: native ok means TS gives the same; native invalid means TS refuses', () => {
    fc.assert(
      fc.property(mutated(chatBody), spans, (raw, { span, prefix }) => void compare('chat', raw, span, prefix)),
      { numRuns: 400 },
    )
    fc.assert(
      fc.property(mutated(completionsBody), spans, (raw, { span, prefix }) => void compare('completions', raw, span, prefix)),
      { numRuns: 200 },
    )
  })

  it('invalid UTF-8 and deep nesting fall back; a BOM is refused as JSON.parse refuses it', () => {
    const body = (s: string) => Buffer.from(`{"messages":[{"role":"user","content":"${s}"}]}`)
    expect(nativeRequest('chat', Buffer.concat([body('a').subarray(0, 39), Buffer.of(0xff), body('a').subarray(39)]), { span: 8, prefixLength: 8, maxDepth: 64 }).status).toBe('unsupported')
    expect(nativeRequest('chat', Buffer.concat([Buffer.of(0xef, 0xbb, 0xbf), body('a')]), { span: 8, prefixLength: 8, maxDepth: 64 }).status).toBe('invalid')
    expect(() => openAIRequest('chat', Buffer.concat([Buffer.of(0xef, 0xbb, 0xbf), body('a')]), 8)).toThrow(RequestError)
    const deep = Buffer.from(`{"messages":[{"role":"user","content":"a"}],"x":${'['.repeat(70)}${']'.repeat(70)}}`)
    expect(nativeRequest('chat', deep, { span: 8, prefixLength: 8, maxDepth: 64 }).status).toBe('unsupported')
    expect(nativeRequest('chat', deep, { span: 8, prefixLength: 8, maxDepth: 128 }).status).toBe('ok')
    expect(nativeRequest('embeddings', Buffer.from('{"input":"x"}'), { span: 8, prefixLength: 8, maxDepth: 64 }).status).toBe('unsupported')
  })

  it('reads a body in shared memory (as gathered for the parse worker) and an empty one', () => {
    const text = Buffer.from('{"model":"m","messages":[{"role":"user","content":"hi"}]}')
    const shared = Buffer.from(new SharedArrayBuffer(text.length + 8), 4, text.length)
    text.copy(shared)
    const got = nativeRequest('chat', shared, { span: 8, prefixLength: 8, maxDepth: 64 })
    expect(got.status === 'ok' && [Buffer.from(got.request.key).toString(), got.request.model]).toEqual(['\u241euser\u241fhi', 'm'])
    expect(nativeRequest('chat', Buffer.alloc(0), { span: 8, prefixLength: 8, maxDepth: 64 }).status).toBe('invalid')
  })
})

describe('model and prompt_cache_key strings made once per distinct token', () => {
  it("a token the same as the last call's gives the same string; any other is read again", () => {
    const o = { span: 8, prefixLength: 8, maxDepth: 64 }
    const body = (model: string, cacheKey?: string) =>
      Buffer.from(`{"model":${model}${cacheKey === undefined ? '' : `,"prompt_cache_key":${cacheKey}`},"messages":[{"role":"user","content":"hi"}]}`)
    const facts = (b: Buffer) => {
      const r = nativeRequest('chat', b, o)
      if (r.status !== 'ok') throw new Error(`declined: ${b.toString()}`)
      return [r.request.model, r.request.promptCacheKey]
    }
    const long = 'm'.repeat(200)
    // The same bytes, other bytes spelling the same string (an escape), an absent member, a
    // token too long to remember, a body in shared memory, and the binding called directly in
    // between (it moves the memo without the wrapper seeing the tokens).
    const steps: [Buffer, (string | undefined)[]][] = [
      [body('"a"', '"t1"'), ['a', 't1']],
      [body('"a"', '"t1"'), ['a', 't1']],
      [body('"b"', '"t1"'), ['b', 't1']],
      [body('"\\u0062"'), ['b', undefined]],
      [body('"b"', '"t2"'), ['b', 't2']],
      [body(`"${long}"`, '"t2"'), [long, 't2']],
      [body(`"${long}x"`, '"t2"'), [`${long}x`, 't2']],
      [body('"a"', '"a\\"b"'), ['a', 'a"b']],
      [body('"a"', '"a\\"b"'), ['a', 'a"b']],
    ]
    for (const [b, want] of steps) expect(facts(b)).toEqual(want)
    const out = new Uint8Array(256)
    const meta = new Float64Array(12)
    expect(facts(body('"c"'))).toEqual(['c', undefined])
    expect(extractWith(0, body('"d"'), 8, 8, 64, out, meta)).toBe(0)
    expect(extractWith(0, body('"c"'), 8, 8, 64, out, meta)).toBe(0)
    expect(facts(body('"c"'))).toEqual(['c', undefined])
    const shared = Buffer.from(new SharedArrayBuffer(64), 0, body('"e"').length)
    body('"e"').copy(shared)
    expect(facts(shared)).toEqual(['e', undefined])
    expect(facts(shared)).toEqual(['e', undefined])
  })
})

describe('a Router picks the same for an ExtractedKey as for the string', () => {
  const ids = Array.from({ length: 12 }, (_, i) => ({ id: `i${i}` }))
  for (const strategy of ['prefix_aware', 'longest_prefix'] as const) {
    it(strategy, () => {
      // Two routers in step: one picks by the TS text, the other by the native key. Their
      // index state (longest_prefix) evolves only if their picks agree.
      const opts = { instances: ids, strategy, prefixLength: 1024, matchLength: 1024, blockSize: 16 }
      const a = new Router(opts)
      const b = new Router(opts)
      let compared = 0
      try {
        fc.assert(
          fc.property(fc.oneof(chatBody, completionsBody.map((c) => ({ c }))), (x) => {
            const api = Buffer.isBuffer(x) ? 'chat' : 'completions'
            const raw = Buffer.isBuffer(x) ? x : x.c
            const got = compare(api, raw, 1024, 1024)
            if (got.status !== 'ok') return
            const r = openAIRequest(api, raw, 1024)
            let tenant: string | undefined
            try {
              tenant = tenantOf(undefined, r.promptCacheKey)
            } catch {
              return // refused by tenantOf on both paths alike
            }
            const la = a.pick(r.text, { tenant, ...(r.anchor !== undefined && { anchor: r.anchor }) })
            const lb = b.pick(got.request.key, { tenant })
            expect(lb.instance).toBe(la.instance)
            la.release()
            lb.release()
            if (strategy === 'prefix_aware' && !/[\ud800-\udfff]/u.test(r.text)) {
              const k = got.request.key
              expect(xxh3(k.subarray(0, k.keyBytes), tenant === undefined ? 0n : xxh3(tenant))).toBe(keyHash(r.text, tenant, 1024))
            }
            compared++
          }),
          { numRuns: 250 },
        )
      } finally {
        a.close()
        b.close()
      }
      expect(compared).toBeGreaterThan(50)
    })
  }

  it('an ExtractedKey is still a Uint8Array of its text, and its copies are plain arrays', () => {
    const got = nativeRequest('chat', Buffer.from('{"messages":[{"role":"user","content":"hi"}]}'), { span: 1024, prefixLength: 1024, maxDepth: 64 })
    expect(got.status).toBe('ok')
    const k = (got as { request: { key: ExtractedKey } }).request.key
    expect(Buffer.from(k).toString()).toBe('\u241euser\u241fhi')
    expect(k.subarray(1)).not.toBeInstanceOf(ExtractedKey)
  })
})

describe('hashes made in the scan route as the text does', () => {
  const ids = Array.from({ length: 12 }, (_, i) => ({ id: `i${i}` }))
  const headers = fc.option(fc.constantFrom('t1', 'tenant b', 'x'.repeat(64)), { nil: undefined })
  type Opts = { strategy: 'prefix_aware' | 'longest_prefix'; prefixLength: number; matchLength: number; blockSize: number }
  const hashing = (o: Opts, tenant: string | undefined) => ({ tenant, blockBytes: o.strategy === 'longest_prefix' ? o.blockSize : 0 })
  const extract = (api: 'chat' | 'completions', raw: Buffer, o: Opts, header: string | undefined) =>
    nativeRequest(api, raw, { span: textSpan(o.prefixLength, o.strategy, o.matchLength), prefixLength: o.prefixLength, maxDepth: 64, hash: hashing(o, header) })

  for (const strategy of ['prefix_aware', 'longest_prefix'] as const) {
    it(`${strategy}: the same instance as the string pick, with the text wiped after the scan`, () => {
      const opts: Opts = { strategy, prefixLength: 1024, matchLength: 1024, blockSize: 16 }
      const a = new Router({ ...opts, instances: ids })
      const b = new Router({ ...opts, instances: ids })
      let hashed = 0
      let tenants = 0
      try {
        fc.assert(
          fc.property(fc.oneof(chatBody, completionsBody.map((c) => ({ c }))), headers, fc.nat(3), (x, header, copies) => {
            const api = Buffer.isBuffer(x) ? 'chat' : 'completions'
            const raw = Buffer.isBuffer(x) ? x : x.c
            // Longer prompts too, so that longest_prefix chains many blocks.
            const body = copies === 0 ? raw : Buffer.from(raw.toString().replace(/"content":"/g, `"content":"${'sys prompt; '.repeat(40 * copies)}`))
            const got = extract(api, body, opts, header)
            if (got.status !== 'ok') return
            let tenant: string | undefined
            try {
              tenant = tenantOf(header, got.request.promptCacheKey)
            } catch {
              return
            }
            const k = got.request.key
            // Known at the scan unless the body's prompt_cache_key needs decoding.
            if (header !== undefined || got.request.promptCacheKey === undefined) expect(k.hashed).toBe(true)
            if (!k.hashed) return
            hashed++
            if (tenant !== undefined) tenants++
            const r = openAIRequest(api, body, 1024)
            // The pick must not read the text: a wiped one would land elsewhere.
            k.fill(0)
            const la = a.pick(r.text, { tenant, ...(r.anchor !== undefined && { anchor: r.anchor }) })
            const lb = b.pick(k, { tenant })
            expect(lb.instance).toBe(la.instance)
            expect(lb.overflow).toBe(la.overflow)
            la.release()
            lb.release()
          }),
          { numRuns: 300 },
        )
      } finally {
        a.close()
        b.close()
      }
      expect(hashed).toBeGreaterThan(100)
      expect(tenants).toBeGreaterThan(30)
    })
  }

  // A 4,096-character prompt, as serve sees by default.
  const long = (i: number, cacheKey?: string) =>
    Buffer.from(JSON.stringify({ ...(cacheKey !== undefined && { prompt_cache_key: cacheKey }), messages: [{ role: 'system', content: `policy ${i}: ${'answer from the policy. '.repeat(200)}` }, { role: 'user', content: `q${i}` }, { role: 'assistant', content: 'a' }, { role: 'user', content: 'more' }] }))

  // Each change of parameters between the scan and the pick, and whether the string pick on
  // the new parameters is still the reference (a new prefixLength or matchLength cuts the text
  // differently, which the key extracted before cannot know: it routes as its text does).
  const reloads: { name: string; from: Opts; to: Opts; exact: boolean }[] = [
    { name: 'blockSize', from: { strategy: 'longest_prefix', prefixLength: 1024, matchLength: 4096, blockSize: 16 }, to: { strategy: 'longest_prefix', prefixLength: 1024, matchLength: 4096, blockSize: 64 }, exact: true },
    { name: 'strategy to longest_prefix', from: { strategy: 'prefix_aware', prefixLength: 4096, matchLength: 4096, blockSize: 16 }, to: { strategy: 'longest_prefix', prefixLength: 4096, matchLength: 4096, blockSize: 16 }, exact: true },
    { name: 'strategy to prefix_aware', from: { strategy: 'longest_prefix', prefixLength: 4096, matchLength: 4096, blockSize: 16 }, to: { strategy: 'prefix_aware', prefixLength: 4096, matchLength: 4096, blockSize: 16 }, exact: true },
    { name: 'prefixLength', from: { strategy: 'prefix_aware', prefixLength: 4096, matchLength: 4096, blockSize: 16 }, to: { strategy: 'prefix_aware', prefixLength: 2048, matchLength: 4096, blockSize: 16 }, exact: false },
    { name: 'matchLength', from: { strategy: 'longest_prefix', prefixLength: 1024, matchLength: 4096, blockSize: 16 }, to: { strategy: 'longest_prefix', prefixLength: 1024, matchLength: 2048, blockSize: 16 }, exact: false },
  ]
  for (const { name, from, to, exact } of reloads) {
    it(`a reload of ${name} between the scan and the pick: the pick hashes the text`, () => {
      const a = new Router({ ...from, instances: ids })
      const b = new Router({ ...from, instances: ids })
      const c = new Router({ ...from, instances: ids })
      try {
        for (let i = 0; i < 60; i++) {
          const header = i % 3 === 0 ? `t${i}` : undefined
          const raw = long(i, i % 3 === 1 ? `key-${i}` : undefined)
          const got = extract('chat', raw, from, header)
          if (got.status !== 'ok') throw new Error('declined')
          const k = got.request.key
          expect(k.hashed).toBe(true)
          const tenant = tenantOf(header, got.request.promptCacheKey)
          for (const x of [a, b, c]) x.configure(to)
          const r = openAIRequest('chat', raw, textSpan(to.prefixLength, to.strategy, to.matchLength))
          const lb = b.pick(k, { tenant })
          // The reference: the same key without hashes.
          const lc = c.pick(ExtractedKey.copyOf(k, k.keyBytes, k.anchorBytes), { tenant })
          expect(lb.instance).toBe(lc.instance)
          if (exact) {
            const la = a.pick(r.text, { tenant, ...(r.anchor !== undefined && { anchor: r.anchor }) })
            expect(lb.instance).toBe(la.instance)
            la.release()
          }
          lb.release()
          lc.release()
          for (const x of [a, b, c]) x.configure(from)
        }
      } finally {
        for (const x of [a, b, c]) x.close()
      }
    })
  }

  it('another tenant at the pick than at the scan: the pick hashes the text', () => {
    const opts: Opts = { strategy: 'longest_prefix', prefixLength: 1024, matchLength: 4096, blockSize: 16 }
    const a = new Router({ ...opts, instances: ids })
    const b = new Router({ ...opts, instances: ids })
    try {
      for (let i = 0; i < 60; i++) {
        const raw = long(i, i % 2 === 0 ? 'scan' : undefined)
        const got = extract('chat', raw, opts, i % 4 === 1 ? 'header' : undefined)
        if (got.status !== 'ok') throw new Error('declined')
        const k = got.request.key
        const tenant = i % 3 === 0 ? undefined : `pick-${i % 5}`
        const r = openAIRequest('chat', raw, 4096)
        const la = a.pick(r.text, { tenant, ...(r.anchor !== undefined && { anchor: r.anchor }) })
        const lb = b.pick(k, { tenant })
        expect(lb.instance).toBe(la.instance)
        la.release()
        lb.release()
      }
    } finally {
      a.close()
      b.close()
    }
  })
})

describe('the parse worker', () => {
  it('reads a body natively as the main thread does, and declines the same bodies to openAIRequest', async () => {
    const pool = new ParsePool({ size: 1 })
    const o = { span: 64, prefixLength: 32, maxDepth: 64 }
    let native = 0
    try {
      await fc.assert(
        fc.asyncProperty(fc.oneof(chatBody, mutated(chatBody)), async (raw) => {
          const here = nativeRequest('chat', raw, o)
          const there = await pool.parseKey('chat', raw, o).then((r) => r, (e: unknown) => e)
          if (here.status === 'ok') {
            native++
            const { key, ...facts } = here.request
            expect(there).toMatchObject({ native: facts })
            const k = (there as { native: { key: ExtractedKey } }).native.key
            expect(k).toBeInstanceOf(ExtractedKey)
            expect([Buffer.from(k), k.keyBytes, k.anchorBytes]).toEqual([Buffer.from(key), key.keyBytes, key.anchorBytes])
            return
          }
          const want = reference('chat', raw, o.span)
          if (want instanceof RequestError) expect(there).toMatchObject({ code: want.code, message: want.message, status: want.status })
          else expect(there).toStrictEqual({ request: want })
          if (want instanceof RequestError) expect(there).toBeInstanceOf(ProxyError)
        }),
        // About one generated body in six is one the native side reads: enough runs that
        // the count below is reached whatever the seed (80 ran short now and then).
        { numRuns: 240 },
      )
    } finally {
      await pool.close()
    }
    expect(native).toBeGreaterThan(10)
  })
})

// key_extract with its numbers as arguments, written into io where the binding reads them.
function extractWith(api: number, body: Uint8Array, span: number, prefix: number, maxDepth: number, out: Uint8Array, io: Float64Array, outOffset = 0, blockBytes?: number, tenant?: string): number {
  io.set([api, span, prefix, maxDepth, outOffset, blockBytes ?? 0, blockBytes === undefined ? 0 : 1])
  return keyBinding.key_extract(body, out, io, tenant)
}

describe('the native entry points', () => {
  const meta = new Float64Array(10)
  const body = Buffer.from('{"messages":[{"role":"user","content":"hi"}]}')

  it('refuse bad arguments with coded errors, never a crash', () => {
    const out = new Uint8Array(64)
    const code = (fn: () => unknown) => {
      try {
        fn()
      } catch (e) {
        return (e as { code?: string }).code
      }
      return 'returned'
    }
    expect(code(() => extractWith(2, body, 8, 8, 64, out, meta))).toBe('ERR_OUT_OF_RANGE')
    expect(code(() => extractWith(0, 'x' as unknown as Uint8Array, 8, 8, 64, out, meta))).toBe('ERR_INVALID_ARG_TYPE')
    expect(code(() => extractWith(0, body, 0, 1, 64, out, meta))).toBe('ERR_OUT_OF_RANGE')
    expect(code(() => extractWith(0, body, 8, 9, 64, out, meta))).toBe('ERR_OUT_OF_RANGE')
    // Room for min(4*span, body bytes) is needed: 32 here.
    expect(code(() => extractWith(0, body, 8, 8, 64, new Uint8Array(31), meta))).toBe('ERR_OUT_OF_RANGE')
    expect(code(() => extractWith(0, body, 8, 8, 64, out, meta, 40))).toBe('ERR_OUT_OF_RANGE')
    expect(code(() => extractWith(0, body, 8, 8, 64, out, new Float64Array(9)))).toBe('ERR_INVALID_ARG_TYPE')
    expect(code(() => extractWith(0, body, 8, 8, 64, out, meta, 0, -1))).toBe('ERR_OUT_OF_RANGE')
    expect(code(() => extractWith(0, body, 8, 8, 64, out, meta, 0, 16, 5 as unknown as string))).toBe('ERR_INVALID_ARG_TYPE')
    // Hashes are written only where out has room for them after the text.
    expect(extractWith(0, body, 8, 8, 64, out, meta, 32, 0, undefined)).toBe(0)
    expect(meta[9]).toBe(0)
    expect(extractWith(0, body, 8, 8, 64, new Uint8Array(128), meta, 0, 0, undefined)).toBe(0)
    expect(meta[9]).toBeGreaterThan(0)
    expect(code(() => extractWith(0, body, 8, 8, 64, body as unknown as Uint8Array, meta))).toBe('ERR_INVALID_ARG_VALUE')
    expect(code(() => extractWith(0, body, 8, 8, 64, out, meta, 32))).toBe('returned')
    const h = native.router_create(undefined, 64, 64)
    native.router_set_instances(h, ['a', 'b'], [1, 1])
    // The pick of an extracted key (router_pick_io, io kind 1): [kind, keyBytes, anchor, hashed,
    // group, tenant, avoid count], the result over the first words.
    const io = native.router_io(h)
    const pickText = (t: Uint8Array, keyBytes: number, anchor: number, hashed: boolean, tenant?: string) => {
      io.fill(0)
      io.set([1, keyBytes, anchor, hashed ? 1 : 0, -1, tenant === undefined ? 0 : 1, 0])
      return native.router_pick_io(h, t, tenant, undefined)
    }
    const text = new Uint8Array(8)
    expect(code(() => pickText(text, 9, -1, false))).toBe('ERR_OUT_OF_RANGE')
    expect(code(() => pickText(text, 8, 9, false))).toBe('ERR_OUT_OF_RANGE')
    expect(code(() => pickText('x' as unknown as Uint8Array, 0, -1, false))).toBe('ERR_INVALID_ARG_TYPE')
    expect(code(() => native.router_pick_io({} as NativeHandle, text, undefined, undefined))).toBe('ERR_INVALID_ARG_TYPE')
    // Text in shared memory reads as any other (it used to be read through a missing ArrayBuffer).
    const shared = new Uint8Array(new SharedArrayBuffer(8))
    expect(pickText(shared, 8, -1, false)).toBe(0)
    expect(native.router_release(h, io[0]!)).toBe(true)
    // A key claiming hashes it has not (no room after its text, or anything but a record there)
    // is hashed from its text: the pick is the same as without the claim.
    const noted = (t: Uint8Array, hashed: boolean) => {
      expect(pickText(t, t.length, -1, hashed, 'tenant')).toBe(0)
      const slot = io[0]
      native.router_release(h, slot!)
      return slot
    }
    for (let i = 0; i < 16; i++) {
      const filled = new Uint8Array(256).map((_, j) => (i * 131 + j * 7) & 0xff)
      expect(noted(filled.subarray(0, 8 + i), true)).toBe(noted(filled.subarray(0, 8 + i), false))
      expect(noted(filled.slice(0, 8 + i), true)).toBe(noted(filled.slice(0, 8 + i), false))
    }
    expect(native.xxh3(shared, 0n)).toBe(native.xxh3(new Uint8Array(8), 0n))
    native.router_close(h)
  })
})
