import { Writable } from 'node:stream'
import { describe, expect, it } from 'vitest'
import { xxh3 } from '../../src/core/hash.js'
import { openAIRequest } from '../../src/core/key/openai-key.js'
import { formatDuration, parseDuration } from '../../src/replay/duration.js'
import { SharedRequests } from '../../src/replay/closed-loop.js'
import { codePointPrefix } from '../../src/core/key/key-hash.js'
import { prepareRequest, trackingKey } from '../../src/replay/prepare.js'
import { Progress } from '../../src/replay/progress.js'
import { ReplicatedRouter, type Placement, type ReplayRouter } from '../../src/replay/routers.js'
import { resolveStrategies, strategyNames } from '../../src/replay/strategies.js'
import { resolveParams } from '../../src/replay/types.js'
import { WORKLOADS } from '../../src/replay/workloads/index.js'
import { STRATEGIES } from '../../src/core/options.js'
import { VirtualFleet } from '../../src/sim/index.js'

describe('prepareRequest', () => {
  const fleet = new VirtualFleet({ instances: 1, profile: 'tiny' })
  const body = {
    messages: [
      { role: 'system', content: 'Be brief. '.repeat(30) },
      { role: 'user', content: [{ type: 'text', text: 'What is ' }, { type: 'text', text: 'this? é' }] },
    ],
    max_completion_tokens: 7,
    prompt_cache_key: 'cache-scope',
  }
  const o = { model: fleet.sim.model, blockSize: fleet.sim.engine.blockSize, tokenizer: fleet.sim.tokenizer, trackKeys: 4096 }

  it('keys the prompt as the virtual fleet does and routes by the proxy’s text', () => {
    const p = prepareRequest({ at: 5, api: 'chat', body }, 3, o)
    const direct = fleet.prepare({
      messages: [
        { role: 'system', content: body.messages[0]!.content as string },
        { role: 'user', content: 'What is \nthis? é' },
      ],
    })
    expect(p.prompt.promptTokens).toBe(direct.promptTokens)
    expect([...p.prompt.blockKeys]).toEqual([...direct.blockKeys])
    expect(p.text).toBe(openAIRequest('chat', Buffer.from(JSON.stringify(body)), 4096).text)
    expect(p).toMatchObject({ index: 3, at: 5, maxTokens: 7, tenant: 'cache-scope' })
    // The header wins over prompt_cache_key, as in the proxy.
    expect(prepareRequest({ at: 0, api: 'chat', body, tenant: 'acme' }, 0, o).tenant).toBe('acme')
    expect(p.key).toBe(trackingKey(p.text, 'cache-scope', 4096))
    expect(prepareRequest({ at: 0, api: 'chat', body }, 0, { ...o, trackKeys: undefined } as never).key).toBeNaN()
  })

  it('keys completions prompts, text or token ids', () => {
    const t = prepareRequest({ at: 0, api: 'completions', body: { prompt: 'x'.repeat(100) } }, 0, o)
    expect(t.prompt.blockKeys).toEqual(fleet.prepare({ text: 'x'.repeat(100) }).blockKeys)
    const ids = prepareRequest({ at: 0, api: 'completions', body: { prompt: Array.from({ length: 40 }, (_, i) => i) } }, 0, o)
    expect(ids.prompt.promptTokens).toBe(40)
    expect(ids.prompt.blockKeys).toEqual(fleet.prepare({ tokenIds: Array.from({ length: 40 }, (_, i) => i) }).blockKeys)
  })

  it('cuts routing keys by code points, as the router does', () => {
    expect(codePointPrefix('a😀b', 2)).toBe('a😀')
    expect(codePointPrefix('abc', 10)).toBe('abc')
    expect(trackingKey('x'.repeat(5000), undefined, 4096)).toBe(Number(BigInt.asUintN(52, xxh3('x'.repeat(4096)))))
    expect(trackingKey('abc', 't', 4096)).not.toBe(trackingKey('abc', undefined, 4096))
  })
})

describe('durations', () => {
  it('parses and prints hours, minutes, seconds and milliseconds', () => {
    expect(parseDuration('1h')).toBe(3_600_000)
    expect(parseDuration('30m')).toBe(1_800_000)
    expect(parseDuration('90s')).toBe(90_000)
    expect(parseDuration('1h30m')).toBe(5_400_000)
    expect(parseDuration('250ms')).toBe(250)
    expect(parseDuration('2.5')).toBe(2500)
    for (const bad of ['', 'h', '1d', '1h x', '-5s']) expect(parseDuration(bad)).toBeNaN()
    expect(formatDuration(3_600_000)).toBe('1h')
    expect(formatDuration(90_000)).toBe('1m30s')
    expect(formatDuration(1500)).toBe('1.5s')
    expect(formatDuration(0)).toBe('0ms')
  })
})

describe('Progress', () => {
  const sink = (tty: boolean) => {
    const chunks: string[] = []
    const s = Object.assign(
      new Writable({
        write(c, _e, cb) {
          chunks.push(String(c))
          cb()
        },
      }),
      { isTTY: tty },
    )
    return { s, chunks }
  }

  it('redraws a bar on a terminal and prints plain lines elsewhere', () => {
    const tty = sink(true)
    const p = new Progress(tty.s, 60_000, 'replay')
    p.update(30_000, 100)
    p.done()
    expect(tty.chunks[0]).toMatch(/^\r\x1b\[Kreplay █+░+  50% 30s\/1m simulated, 100 requests/)
    expect(tty.chunks.at(-1)).toBe('\r\x1b[K')
    const log = sink(false)
    const q = new Progress(log.s, 60_000, 'replay', 0)
    q.update(15_000, 10)
    q.update(60_000, 40)
    q.done()
    expect(log.chunks).toEqual([expect.stringMatching(/^replay: 25% 15s\/1m simulated, 10 requests, .* s\n$/), expect.stringMatching(/^replay: 100% 1m\/1m/)])
  })
})

describe('strategies', () => {
  it('takes every native strategy from the core at run time, then the peers', () => {
    expect(strategyNames()).toEqual([
      ...STRATEGIES,
      'longest_prefix:hash',
      'longest_prefix:events',
      'longest_prefix:shared',
      'sglang_cache_aware',
      'llmd_default',
      'stack_prefixaware',
      'llmd_precise',
      'dynamo_kv',
      'dynamo_kv:sync',
    ])
    // The event-fed lanes run when named, not by default; with router replicas, by default too.
    expect(resolveStrategies([]).map((f) => f.name)).toEqual([...STRATEGIES, 'longest_prefix:hash', 'sglang_cache_aware', 'llmd_default', 'stack_prefixaware'])
    expect(resolveStrategies([], 4).map((f) => f.name)).toEqual(strategyNames())
    expect(resolveStrategies(['Longest-Prefix:events', 'LLMD-precise', 'dynamo-kv']).map((f) => f.name)).toEqual(['longest_prefix:events', 'llmd_precise', 'dynamo_kv'])
    expect(resolveStrategies(['PREFIX-AWARE', 'llmd-default', 'prefix_aware']).map((f) => f.name)).toEqual(['prefix_aware', 'llmd_default'])
    expect(resolveStrategies(['Longest-Prefix:hash']).map((f) => f.name)).toEqual(['longest_prefix:hash'])
    expect(() => resolveStrategies(['nope'])).toThrow(/unknown strategy 'nope'/)
    expect(() => resolveStrategies(['prefix_aware:balanced'])).toThrow(/unknown strategy 'prefix_aware:balanced'/)
  })

  it('gives every router replica every engine’s KV events, when all of them read events', () => {
    const got: string[] = []
    const fake = (k: number, events: boolean): ReplayRouter => ({
      route: (): Placement => ({ instance: k, overflow: false, finish: () => {} }),
      setInstances: () => {},
      close: () => {},
      ...(events && { kvEvents: (i: number, evs: readonly unknown[], at: number) => void got.push(`${k}:${i}:${evs.length}@${at}`) }),
    })
    const r = new ReplicatedRouter([fake(0, true), fake(1, true)])
    r.kvEvents!(3, [{ type: 'AllBlocksCleared' }], 42)
    expect(got).toEqual(['0:3:1@42', '1:3:1@42'])
    expect(new ReplicatedRouter([fake(0, true), fake(1, false)]).kvEvents).toBeUndefined()
  })

  it('deals requests round-robin over router replicas', () => {
    const seen: number[] = []
    const fake = (k: number): ReplayRouter => ({
      route: (): Placement => {
        seen.push(k)
        return { instance: k, overflow: false, finish: () => {} }
      },
      setInstances: () => {},
      close: () => {},
    })
    const r = new ReplicatedRouter([fake(0), fake(1), fake(2)])
    for (let i = 0; i < 7; i++) r.route({} as never, 0)
    expect(seen).toEqual([0, 1, 2, 0, 1, 2, 0])
  })
})

describe('SharedRequests (closed loop)', () => {
  const w = WORKLOADS['long-context']!
  const params = resolveParams(w, { rate: 10, documents: 5, 'doc-tokens': 200, 'question-tokens': 8, 'output-tokens': 4 })
  const prep = { model: 'm', blockSize: 16, tokenizer: 'bytes' as const }

  it('prepares each request once, in order, as far as the furthest lane draws', () => {
    const seen: number[] = []
    const shared = new SharedRequests(w.generate(params, { seed: 1, durationMs: 2_000 }), prep, (p) => seen.push(p.index))
    expect(shared.get(3)!.index).toBe(3)
    expect(shared.get(1)!.index).toBe(1) // a slower lane reads what is kept
    expect(seen).toEqual([0, 1, 2, 3])
    expect(shared.prepared).toBe(4)
    shared.release(2)
    expect(() => shared.get(1)).toThrow(/request 1 was already released/)
    expect(shared.get(2)!.index).toBe(2)
  })

  it('says when the workload has no more', () => {
    const shared = new SharedRequests(w.generate(params, { seed: 1, durationMs: 1_000 }), prep)
    let n = 0
    while (shared.get(n) !== undefined) n++
    expect(n).toBeGreaterThan(3)
    expect(n).toBeLessThan(30) // ~10 a second for 1 s
    expect(shared.get(n + 5)).toBeUndefined()
  })
})
