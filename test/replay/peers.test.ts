import { describe, expect, it } from 'vitest'
import { LlmdDefault, gieChatPrompt, LLMD_DEFAULTS } from '../../src/replay/peers/llmd-default.js'
import { PrefixIndexer } from '../../src/replay/peers/prefix-indexer.js'
import { ApproxTree } from '../../src/replay/peers/radix-tree.js'
import { SglangCacheAware, SGLANG_DEFAULTS, sglangText } from '../../src/replay/peers/sglang-cache-aware.js'
import { StackPrefixAware, STACK_CHUNK_SIZE, stackText } from '../../src/replay/peers/stack-prefixaware.js'

describe('SGLang approximate tree (tree.rs semantics)', () => {
  it('matches prefixes, splits nodes and keeps per-worker character counts', () => {
    const t = new ApproxTree()
    t.insert('hello', 1, 0)
    t.insert('apple', 2, 0)
    t.insert('apricot', 2, 0)
    t.insert('application', 3, 0)
    expect(t.prefixMatch('hello world', 1)).toEqual({ matched: 5, worker: 1 })
    expect(t.prefixMatch('apple pie', 1)).toEqual({ matched: 5, worker: 2 })
    // A partial match of a node counts, and names a worker on that node.
    expect(t.prefixMatch('apricorn', 1).matched).toBe(6)
    // No match: tree.rs still names a worker (the root lists them all); the rate is 0.
    expect(t.prefixMatch('banana', 1).matched).toBe(0)
    expect(new ApproxTree().prefixMatch('x', 0)).toEqual({ matched: 0, worker: -1 })
    expect(t.chars).toEqual(t.countByWalking())
    expect(t.chars.get(2)).toBe('apple'.length + 'ricot'.length)
  })

  it('names the worker with the fewest characters, evicts least recently used leaves past the size, removes workers', () => {
    const t = new ApproxTree()
    t.insert('ap', 1, 0)
    t.insert('icot', 1, 0)
    t.insert('cat', 2, 0)
    expect(t.smallest()).toBe(2)
    t.insert('zebra-one', 3, 10)
    t.insert('zebra-two', 3, 20)
    t.evictBySize(10)
    expect(t.chars.get(3)).toBeLessThanOrEqual(10)
    expect(t.prefixMatch('zebra-two', 30).matched).toBe(9) // the more recent leaf stayed
    expect(t.prefixMatch('zebra-one', 30).matched).toBe(6)
    expect(t.chars).toEqual(t.countByWalking())
    t.removeWorker(1)
    expect(t.prefixMatch('apricot', 40).matched).toBe(0)
    expect(t.chars.has(1)).toBe(false)
  })
})

describe('SGLang cache_aware (cache_aware.rs)', () => {
  const text = (s: string, n = 400): string => s.repeat(Math.ceil(n / s.length)).slice(0, n)

  it('goes to the worker whose tree matches above cache_threshold, else to the smallest tree', () => {
    const r = new SglangCacheAware([0, 1, 2])
    // Empty trees: the smallest (first) worker takes it; then the same text sticks there.
    const a = text('document A ')
    expect(r.routeText(a, 0).instance).toBe(0)
    expect(r.routeText(a + ' question 2', 1).instance).toBe(0)
    // A different text matching nothing goes to the smallest tree, not to 0.
    const b = text('another B ')
    expect(r.routeText(b, 2).instance).toBe(1)
    // Sharing 25% of a's characters is not above 0.3: smallest tree (worker 2).
    expect(r.routeText(a.slice(0, 100) + text('zz', 300), 3).instance).toBe(2)
    // Sharing 40% is: a's worker.
    expect(r.routeText(a.slice(0, 160) + text('yy', 240), 4).instance).toBe(0)
  })

  it('sends to the least loaded worker only when max − min > 64 and max > 1.5 × min', () => {
    const r = new SglangCacheAware([0, 1])
    const a = text('hot prefix ')
    const held = []
    for (let i = 0; i < 65; i++) held.push(r.routeText(a, i))
    // 65 in flight on 0, none on 1: 65 − 0 > 64 and 65 > 0 — imbalanced.
    expect(held.every((p) => p.instance === 0)).toBe(true)
    expect(r.loadOf(0)).toBe(65)
    const p = r.routeText(a, 100)
    expect(p).toMatchObject({ instance: 1, overflow: true })
    // Balanced again once requests finish: back to the cache match.
    for (const h of held.slice(0, 10)) h.finish()
    held[10]!.finish()
    held[10]!.finish() // finish is idempotent
    expect(r.loadOf(0)).toBe(54)
    expect(r.routeText(a, 101)).toMatchObject({ instance: 0, overflow: false })
    // The absolute rule alone is not enough: 130 vs 65 is > 64 apart but not > 1.5×.
    const q = new SglangCacheAware([0, 1], { ...SGLANG_DEFAULTS, balanceRelThreshold: 2.5 })
    for (let i = 0; i < 65; i++) q.routeText(text('x'), i).instance
    for (let i = 0; i < 65; i++) q.routeText(text('y'), i) // 'y' goes to the smaller tree: 1
    expect([q.loadOf(0), q.loadOf(1)]).toEqual([65, 65])
  })

  it("uses SGLang's routing text: message contents joined by spaces", () => {
    const body = {
      messages: [
        { role: 'system', content: 'sys' },
        { role: 'user', content: [{ type: 'text', text: 'a' }, { type: 'image_url', image_url: { url: 'u' } }, { type: 'text', text: 'b' }] },
        { role: 'assistant', content: 'reply', reasoning_content: 'why' },
        { role: 'assistant', content: null },
      ],
    }
    expect(sglangText({ api: 'chat', body })).toBe('sys a b reply why')
    expect(sglangText({ api: 'completions', body: { prompt: ['x', 'y'] } })).toBe('x y')
  })

  it('drops a removed worker from the tree and gives an added one new prefixes', () => {
    const r = new SglangCacheAware([0, 1])
    const a = text('doc a ')
    r.routeText(a, 0)
    r.setInstances([1, 2])
    expect(r.tree.chars.has(0)).toBe(false)
    // 2 joined with an empty tree: 1 (which holds nothing either, listed first) takes the
    // next new prefix, 2 the one after.
    expect(r.routeText(text('doc b '), 1).instance).toBe(1)
    expect(r.routeText(text('doc c '), 2).instance).toBe(2)
  })
})

describe('llm-d default scheduler (queue 2 : KV 2 : prefix 3)', () => {
  const engine = (waiting = 0, usage = 0) => ({ numWaiting: waiting, cache: { usage } })
  const prompt = (s: string) => `<|im_start|>user\n${s.repeat(Math.ceil(2000 / s.length)).slice(0, 2000)}<|im_end|>\n`

  it('hashes 64-byte blocks after a model block, at most 256 blocks', () => {
    const r = new LlmdDefault({ members: [0], model: 'm', seed: 1, engines: [engine()] })
    expect(r.hashPrompt('x'.repeat(63))).toHaveLength(0)
    expect(r.hashPrompt('x'.repeat(64 * 3 + 10))).toHaveLength(4)
    expect(r.hashPrompt('x'.repeat(64 * 300))).toHaveLength(257)
    const a = r.hashPrompt('a'.repeat(64) + 'b'.repeat(64))
    const b = r.hashPrompt('a'.repeat(64) + 'c'.repeat(64))
    expect(a[1]).toBe(b[1])
    expect(a[2]).not.toBe(b[2])
    expect(r.hashPrompt('a'.repeat(64), 'other-model')[0]).not.toBe(a[0])
  })

  it('follows the prefix when load is even, and the queue when one instance is backed up', () => {
    const engines = [engine(), engine(), engine()]
    const r = new LlmdDefault({ members: [0, 1, 2], model: 'm', seed: 1, engines })
    const p = prompt('document one ')
    const first = r.routePrompt(p, 0).instance
    // Same prefix, same loads: the prefix scorer adds 3 × 1.0 for the instance that has it.
    for (let t = 1; t < 5; t++) expect(r.routePrompt(p, t * 100).instance).toBe(first)
    // That instance's queue is now the longest (queue score 0) and its KV a quarter used:
    // 0 + 2 × 0.75 + 3 × 1 = 4.5 against 2 + 2 + 0 = 4 for the others — the prefix still wins ...
    engines[first] = engine(10, 0.25)
    expect(r.routePrompt(p, 1000).instance).toBe(first)
    // ... until KV is nearly full as well: 0 + 2 × 0.05 + 3 = 3.1 < 4.
    engines[first] = engine(10, 0.95)
    expect(r.routePrompt(p, 2000).instance).not.toBe(first)
  })

  it('reads metrics at most every 50 ms, as the EPP scrapes them', () => {
    const engines = [engine(), engine()]
    const r = new LlmdDefault({ members: [0, 1], model: 'm', seed: 1, engines }, { ...LLMD_DEFAULTS, prefixWeight: 0 })
    r.routePrompt('q', 0)
    engines[0] = engine(5, 0.9)
    const soon = new Set<number>()
    for (let i = 0; i < 20; i++) soon.add(r.routePrompt('q', 10).instance) // stale: both look equal
    expect(soon.size).toBe(2)
    expect(r.routePrompt('q', 60).instance).toBe(1) // fresh: 0 is busy
  })

  it('keeps an LRU of hashes per instance and forgets evicted ones', () => {
    const ix = new PrefixIndexer(3, 40)
    ix.add([1, 2, 3], 35)
    ix.add([1, 2, 3, 4], 0)
    // 0's LRU of 3 lost hash 1; indexer.go still counts 0 for 2 and 3 (it walks until no server has a hash).
    expect([...ix.match([1, 2, 3, 9])].filter((c) => c > 0)).toEqual([2, 3])
    ix.add([5], 35) // evicts 1 (the oldest) from 35
    expect(ix.match([1, 2])[35]).toBe(0)
    expect(ix.match([2, 3])[35]).toBe(2)
    ix.add([2], 35) // refresh 2; then 6 evicts 3
    ix.add([6], 35)
    expect(ix.match([2])[35]).toBe(1)
    expect(ix.match([3])[35]).toBe(0)
    expect(ix.size(35)).toBe(3)
    // Nobody has hash 1 any more, so matching stops at once, for 0 as well.
    expect(ix.match([1, 2])[0]).toBe(0)
  })

  it("builds GIE's chat prompt", () => {
    const body = { messages: [{ role: 'system', content: 's' }, { role: 'user', content: [{ type: 'text', text: 'skipped' }] }, { role: 'user', content: 'u' }] }
    expect(gieChatPrompt({ api: 'chat', body })).toBe('<|im_start|>system\ns<|im_end|>\n<|im_start|>user\nu<|im_end|>\n')
  })
})

describe('production-stack prefixaware (routing_logic.py, hashtrie.py)', () => {
  const doc = (seed: string, n: number) => `${seed} `.repeat(Math.ceil(n / (seed.length + 1))).slice(0, n)

  it('follows the longest match in whole 128-character chunks; new texts go anywhere', () => {
    const r = new StackPrefixAware({ members: [0, 1, 2, 3], seed: 1 })
    const a = doc('alpha', 5 * STACK_CHUNK_SIZE)
    const home = r.routeText(a).instance
    // The same first chunks with a new ending: the home holds the longest match.
    for (let q = 0; q < 20; q++) expect(r.routeText(`${a}question ${q}`).instance).toBe(home)
    // 127 characters in common and a different 128th: the first chunk differs, nothing
    // matches, and the texts are placed at random over all four.
    const seen = new Set<number>()
    for (let d = 0; d < 24; d++) seen.add(r.routeText(`${a.slice(0, STACK_CHUNK_SIZE - 1)}${String.fromCharCode(65 + d)}${doc('rest', 300)}`).instance)
    expect(seen.size).toBe(4)
  })

  it('narrows to the endpoints that hold the deepest match, among those still available', () => {
    const r = new StackPrefixAware({ members: [0, 1, 2], seed: 2 })
    const shared = doc('shared system prompt', 2 * STACK_CHUNK_SIZE)
    const tail = (s: string) => doc(s, 3 * STACK_CHUNK_SIZE)
    const home = r.routeText(shared + tail('A')).instance
    // With the home gone, nothing available holds `shared`: a random other endpoint gets it.
    r.setInstances([0, 1, 2].filter((e) => e !== home))
    const second = r.routeText(shared + tail('B')).instance
    expect(second).not.toBe(home)
    r.setInstances([0, 1, 2])
    // Now both hold `shared`; each deeper match goes to its own endpoint.
    expect(r.routeText(`${shared}${tail('A')}more`).instance).toBe(home)
    expect(r.routeText(`${shared}${tail('B')}more`).instance).toBe(second)
    // A new continuation of `shared` goes to one of its two holders, never the third.
    const seen = new Set<number>()
    for (let i = 0; i < 30; i++) seen.add(r.routeText(shared + tail(`new ${i}`)).instance)
    expect([...seen].sort()).toEqual([home, second].sort())
  })

  it('has no load signal: one popular prompt stays on one endpoint', () => {
    const r = new StackPrefixAware({ members: [0, 1, 2, 3], seed: 3 })
    const system = doc('everyone uses this system prompt', 4 * STACK_CHUNK_SIZE)
    const first = r.routeText(system).instance
    const held = Array.from({ length: 50 }, (_, i) => r.routeText(`${system}${doc(`q${i}`, 300)}`))
    expect(held.every((p) => p.instance === first && p.overflow === null)).toBe(true)
  })

  it("builds production-stack's text: contents joined by newlines, no roles", () => {
    const body = { messages: [{ role: 'system', content: 's' }, { role: 'user', content: [{ type: 'text', text: 'a' }, { type: 'image_url' }, { type: 'text', text: 'b' }] }, { role: 'assistant', content: null }, { role: 'user', content: 'u' }] }
    expect(stackText({ api: 'chat', body })).toBe('s\na b\nu')
    expect(stackText({ api: 'completions', body: { prompt: 'p' } })).toBe('p')
  })
})
