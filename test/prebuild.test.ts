// The committed prebuild must be built from the native sources in this checkout: a change
// to native/ or binding.gyp without `npm run prebuild` fails here.
import { execFileSync } from 'node:child_process'
import { existsSync } from 'node:fs'
import { createRequire } from 'node:module'
import { fileURLToPath } from 'node:url'
import { describe, expect, it } from 'vitest'
import type { NativeBinding } from '../src/core/native.js'
import { native } from '../src/core/native.js'

const require = createRequire(import.meta.url)
const root = fileURLToPath(new URL('..', import.meta.url))
const { nativeSources, nativeSourcesHash } = require('../scripts/native-sources-hash.cjs') as {
  nativeSources(root: string): string[]
  nativeSourcesHash(root: string): string
}
const prebuild = `${root}prebuilds/${process.platform}-${process.arch}/prefix-router.node`
const committedPlatform = process.platform === 'linux' && process.arch === 'x64'

describe('committed prebuild', () => {
  it.runIf(committedPlatform)('exists for linux-x64', () => {
    expect(existsSync(prebuild)).toBe(true)
  })

  it.runIf(existsSync(prebuild))('was built from the current native sources', () => {
    const binding = require(prebuild) as NativeBinding
    expect(binding.build_info().sourcesHash).toBe(nativeSourcesHash(root))
  })

  it.runIf(existsSync(prebuild))('hashes like the binary in use', () => {
    const binding = require(prebuild) as NativeBinding
    for (const input of ['', 'abc', 'x'.repeat(10_000)]) expect(binding.xxh3(input, 7n)).toBe(native.xxh3(input, 7n))
  })
})

describe('binary in use', () => {
  it('reports the sources hash it was built from', () => {
    expect(native.build_info().sourcesHash).toBe(nativeSourcesHash(root))
  })
})

describe('published package', () => {
  // Where no prebuild fits, `npm install prefix-router` compiles: every source the build reads must ship.
  it('carries every native source and the prebuild', () => {
    const out = execFileSync('npm', ['pack', '--dry-run', '--json', '--ignore-scripts'], { cwd: root, encoding: 'utf8' })
    const packed = new Set((JSON.parse(out) as { files: { path: string }[] }[])[0]!.files.map((f) => f.path))
    const missing = [...nativeSources(root), 'scripts/native-sources-hash.cjs', 'prebuilds/linux-x64/prefix-router.node'].filter((f) => !packed.has(f))
    expect(missing).toEqual([])
  })
})
