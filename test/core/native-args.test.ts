// The addon's bindings called from JavaScript with any arguments: a wrong type, kind, backing
// or length is a coded error, never a crash. The calls run in a child process, so a segfault
// fails the test (with the call it died in) instead of ending vitest's worker.
import { spawn } from 'node:child_process'
import { fileURLToPath } from 'node:url'
import { describe, expect, it } from 'vitest'
import { native } from '../../src/core/native.js'

const root = fileURLToPath(new URL('../..', import.meta.url))
/** Calls per binding: a valid call with some arguments changed, or arguments made up whole. */
const RUNS = 300

interface Run {
  code: number | null
  signal: NodeJS.Signals | null
  stdout: string
  lastCall: string
}

function run(args: string[]): Promise<Run> {
  return new Promise((resolve, reject) => {
    const p = spawn(process.execPath, args, { stdio: ['ignore', 'pipe', 'pipe'] })
    let stdout = ''
    let tail = ''
    p.stdout.on('data', (d: Buffer) => (stdout += d.toString()))
    // Only the end is kept: each call writes its line before it runs.
    p.stderr.on('data', (d: Buffer) => (tail = (tail + d.toString()).slice(-4000)))
    p.on('error', reject)
    p.on('close', (code, signal) => resolve({ code, signal, stdout, lastCall: tail.trimEnd().split('\n').at(-1) ?? '' }))
  })
}

describe('native bindings against any argument', () => {
  it('xxh3_chain writes into a BigUint64Array on a SharedArrayBuffer, at an offset, as into one on an ArrayBuffer', async () => {
    const script = `
      const { createRequire } = require('node:module')
      const native = require(require('node-gyp-build').resolve(${JSON.stringify(root)}))
      const data = new TextEncoder().encode('x'.repeat(100))
      const plain = new BigUint64Array(6)
      native.xxh3_chain(data, 16, 7n, plain)
      const onShared = new BigUint64Array(new SharedArrayBuffer(8 * 8), 16, 6)
      native.xxh3_chain(data, 16, 7n, onShared)
      const f64 = new Float64Array(new SharedArrayBuffer(8 * 8), 8, 6)
      native.xxh3_chain(data, 16, 7n, f64)
      process.stdout.write(JSON.stringify({ plain: [...plain].map(String), shared: [...onShared].map(String), f64: [...f64] }))
    `
    const r = await run(['-e', script])
    expect({ code: r.code, signal: r.signal }).toEqual({ code: 0, signal: null })
    const out = JSON.parse(r.stdout) as { plain: string[]; shared: string[]; f64: number[] }
    expect(out.shared).toEqual(out.plain)
    expect(out.f64).toEqual(out.plain.map((h) => Number(BigInt(h) & ((1n << 52n) - 1n))))
  })

  it('every exported binding, fuzzed, throws coded errors and does not crash', async () => {
    const r = await run([fileURLToPath(new URL('../fixtures/native-args-child.mjs', import.meta.url)), root, '20261201', String(RUNS)])
    expect({ code: r.code, signal: r.signal, lastCall: r.code === 0 ? '' : r.lastCall }).toEqual({ code: 0, signal: null, lastCall: '' })
    const out = JSON.parse(r.stdout) as { names: string[]; calls: number; bad: string[] }
    // Every function the addon exports was called (the list is the addon's own, not a copy).
    expect(out.names).toEqual(Object.keys(native).filter((k) => typeof (native as unknown as Record<string, unknown>)[k] === 'function').sort())
    expect(out.calls).toBe(out.names.length * RUNS)
    expect(out.bad).toEqual([])
  })
})
