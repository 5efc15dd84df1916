// One ABI table: the offsets, sizes and limits TypeScript and the addon share are checked
// against the addon's own abi() as the package loads, so a build whose C++ moved one fails at
// start, naming it. These check that the loaded addon agrees, and that a table off by one
// word, row or range is refused with the difference spelled out.
import { describe, expect, it } from 'vitest'
import { ABI, addonRanges, checkAbi, checkRanges, NativeAbiError, type AbiTable } from '../../src/core/abi.js'
import { STRATEGY_INFO } from '../../src/core/strategies.js'
import { PrefixRouterError } from '../../src/core/errors.js'
import { bindingPath, native } from '../../src/core/native.js'
import { limitsAgainstAddon, LIMITS } from '../../src/core/options.js'
import { MAX_WORKERS } from '../../src/config/config.js'

const thrown = (f: () => unknown): unknown => {
  try {
    f()
  } catch (err) {
    return err
  }
  return undefined
}

describe('the ABI table', () => {
  it('matches the loaded addon, and TypeScript limits lie inside its ranges', () => {
    expect(() => checkAbi(native.abi(), bindingPath)).not.toThrow()
    expect(() => checkRanges(limitsAgainstAddon(8192), addonRanges(native.abi()), bindingPath)).not.toThrow()
    // Every word and limit of TypeScript's table is one the addon reports.
    expect(native.abi()).toMatchObject(ABI)
  })

  it('refuses a table with a word moved, naming it with both values', () => {
    const wrong = { ...ABI, io: { ...ABI.io, now: ABI.io.now + 1 } }
    const err = thrown(() => checkAbi(native.abi(), bindingPath, wrong))
    expect(err).toBeInstanceOf(NativeAbiError)
    expect(err).toBeInstanceOf(PrefixRouterError)
    expect(err).toMatchObject({ code: 'NATIVE_ABI_MISMATCH', details: { problems: [`io.now: TypeScript ${ABI.io.now + 1}, addon ${ABI.io.now}`] } })
    expect((err as Error).message).toContain(bindingPath)
  })

  it('refuses a table with another process count, or another KeyHashes size, or an addon with no abi', () => {
    expect(thrown(() => checkAbi(native.abi(), bindingPath, { ...ABI, maxProcesses: 63 }))).toMatchObject({ details: { problems: ['maxProcesses: TypeScript 63, addon 64'] } })
    expect(thrown(() => checkAbi(native.abi(), bindingPath, { ...ABI, keyHashes: { bytes: 64, align: 8 } }))).toMatchObject({
      details: { problems: ['keyHashes.bytes: TypeScript 64, addon 72'] },
    })
    // An addon built before abi() existed: every entry is reported missing.
    const leaves = (v: unknown): number => (typeof v === 'object' && v !== null ? Object.values(v).reduce((n: number, x) => n + leaves(x), 0) : 1)
    expect((thrown(() => checkAbi({}, bindingPath)) as NativeAbiError).details!.problems).toHaveLength(leaves(ABI))
  })

  it('refuses TypeScript limits outside the addon’s ranges', () => {
    const ts = { ...limitsAgainstAddon(8192), prefixLength: { min: LIMITS.prefixLength.min, max: 1 << 21 } }
    expect(thrown(() => checkRanges(ts, addonRanges(native.abi()), bindingPath))).toMatchObject({
      code: 'NATIVE_ABI_MISMATCH',
      details: { problems: [`prefixLength: TypeScript ${LIMITS.prefixLength.min}..${1 << 21}, addon 1..${1 << 20}`] },
    })
    expect(thrown(() => checkRanges(limitsAgainstAddon(1 << 15), addonRanges(native.abi()), bindingPath))).toMatchObject({ details: { problems: ['slots: TypeScript 32768..32768, addon 1..16384'] } })
  })

  it('--workers allows as many workers as the process table has rows beside the primary', () => {
    expect(MAX_WORKERS).toBe(native.abi().maxProcesses - 1)
  })

  // Each mirror TypeScript once kept by hand, altered on the TypeScript side: the load check
  // (checkAbi, as native.ts runs it) refuses it, naming the entry with both values.
  const registry = STRATEGY_INFO.map((s) => s.name)
  const flips: [string, (t: AbiTable) => AbiTable, string][] = [
    ["router_configure's option names", (t) => ({ ...t, configureFields: t.configureFields.map((f) => (f === 'prefixLength' ? 'prefixLen' : f)) as unknown as AbiTable['configureFields'] }), 'configureFields.1: TypeScript prefixLen, addon prefixLength'],
    ["key_extract's io words", (t) => ({ ...t, keyMeta: { ...t.keyMeta, hashBytes: 8 } }), 'keyMeta.hashBytes: TypeScript 8, addon 9'],
    ["key_extract's word count", (t) => ({ ...t, keyMeta: { ...t.keyMeta, words: 11 } }), 'keyMeta.words: TypeScript 11, addon 12'],
    ["key_extract's API codes", (t) => ({ ...t, keyMeta: { ...t.keyMeta, apis: { chat: 1, completions: 0 } } }), 'keyMeta.apis.chat: TypeScript 1, addon 0'],
    ["key_extract's status codes", (t) => ({ ...t, keyMeta: { ...t.keyMeta, status: { ...t.keyMeta.status, unsupported: 3 } } }), 'keyMeta.status.unsupported: TypeScript 3, addon 2'],
    ["the pick's result words", (t) => ({ ...t, pick: { ...t.pick, prefill: 4 } }), 'pick.prefill: TypeScript 4, addon 3'],
    ["the pick's returns", (t) => ({ ...t, pick: { ...t.pick, noGroup: -3 } }), 'pick.noGroup: TypeScript -3, addon -2'],
    ['EXACT_ORPHAN', (t) => ({ ...t, exact: { ...t.exact, orphan: -5 } }), 'exact.orphan: TypeScript -5, addon -1'],
    ['EXACT_NOT_MEMBER', (t) => ({ ...t, exact: { ...t.exact, notMember: -1 } }), 'exact.notMember: TypeScript -1, addon -2'],
    ['EXACT_BLOCK_SIZE', (t) => ({ ...t, exact: { ...t.exact, blockSize: -4 } }), 'exact.blockSize: TypeScript -4, addon -3'],
    ['EXACT_CAPACITY', (t) => ({ ...t, exact: { ...t.exact, capacity: -3 } }), 'exact.capacity: TypeScript -3, addon -4'],
    ["the exact views' order", (t) => ({ ...t, exact: { ...t.exact, views: { none: 0, fresh: 2, stale: 1 } } }), 'exact.views.fresh: TypeScript 2, addon 1'],
    ['the engine block sizes', (t) => ({ ...t, exact: { ...t.exact, maxBlockSize: 2048 } }), 'exact.maxBlockSize: TypeScript 2048, addon 1024'],
    ["the exact batch's op records", (t) => ({ ...t, exact: { ...t.exact, op: { ...t.exact.op, words: 5 } } }), 'exact.op.words: TypeScript 5, addon 4'],
    ['kNoThreshold', (t) => ({ ...t, noThreshold: 2048 }), 'noThreshold: TypeScript 2048, addon 1024'],
  ]
  it.each(flips)('refuses a table with %s altered', (_what, flip, problem) => {
    const err = thrown(() => checkAbi(native.abi(), bindingPath, flip(ABI), registry))
    expect(err).toBeInstanceOf(NativeAbiError)
    expect((err as NativeAbiError).details!.problems).toContain(problem)
    expect((err as Error).message).toContain(problem)
  })

  it('refuses a strategy registry whose order is not the Strategy enum', () => {
    expect(() => checkAbi(native.abi(), bindingPath, ABI, registry)).not.toThrow()
    const swapped = [registry[0]!, registry[1]!, registry[3]!, registry[2]!]
    const err = thrown(() => checkAbi(native.abi(), bindingPath, ABI, swapped)) as NativeAbiError
    expect(err).toBeInstanceOf(NativeAbiError)
    expect(err.details!.problems).toEqual([`strategyEnum.${registry[2]}: enum 2, registry at 3`, `strategyEnum.${registry[3]}: enum 3, registry at 2`])
    expect(thrown(() => checkAbi(native.abi(), bindingPath, ABI, [...registry, 'newest']))).toMatchObject({ details: { problems: ['strategyEnum.newest: enum has none, registry at 4'] } })
  })

  it('takes the limits TypeScript checks from the table: no threshold and the engine block sizes', () => {
    expect(LIMITS.concurrencyThreshold.max).toBe(native.abi().noThreshold)
    expect(LIMITS.exactBlockSize).toMatchObject({ min: native.abi().exact.minBlockSize, max: native.abi().exact.maxBlockSize })
    // The longest_prefix default is "none", the highest threshold an operator may set.
    expect(STRATEGY_INFO.find((s) => s.name === 'longest_prefix')!.defaultThreshold).toBe(LIMITS.concurrencyThreshold.max)
  })

  it('router_configure reads its options by the names abi() lists, and refuses one left out', () => {
    const h = native.router_create(undefined, 16, 8)
    const options = { strategy: 'longest_prefix', prefixLength: 4096, concurrencyThreshold: 10, blockSize: 64, indexBlocks: 100, placementChoices: 3, loadFactor: 3, prefillWeight: 6, matchLength: 8192 }
    expect(Object.keys(options)).toEqual(native.abi().configureFields.slice(0, Object.keys(options).length))
    native.router_configure(h, options)
    expect(native.router_params(h)).toMatchObject({ ...options, strategy: 'longest_prefix', exactBlockSize: 16, engineLoadAll: false })
    const { matchLength: _left, ...without } = options
    expect(() => native.router_configure(h, without as typeof options)).toThrow(/matchLength must be a number/)
    native.router_close(h)
  })
})
