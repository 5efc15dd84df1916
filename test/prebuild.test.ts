// The committed prebuild must be built from the native sources in this checkout: a change
// to native/ or binding.gyp without `npm run prebuild` fails here.
import { existsSync } from 'node:fs'
import { createRequire } from 'node:module'
import { fileURLToPath } from 'node:url'
import { describe, expect, it } from 'vitest'
import type { NativeBinding } from '../src/core/native.js'
import { native } from '../src/core/native.js'

const require = createRequire(import.meta.url)
const root = fileURLToPath(new URL('..', import.meta.url))
const { nativeSourcesHash } = require('../scripts/native-sources-hash.cjs') as { nativeSourcesHash(root: string): string }
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
