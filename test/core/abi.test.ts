// One ABI table: the offsets, sizes and limits TypeScript and the addon share are checked
// against the addon's own abi() as the package loads, so a build whose C++ moved one fails at
// start, naming it. These check that the loaded addon agrees, and that a table off by one
// word, row or range is refused with the difference spelled out.
import { describe, expect, it } from 'vitest'
import { ABI, addonRanges, checkAbi, checkRanges, NativeAbiError } from '../../src/core/abi.js'
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
    expect((thrown(() => checkAbi({}, bindingPath)) as NativeAbiError).details!.problems).toHaveLength(Object.values(ABI.io).length + 5)
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
})
