// The global setup's test of whether dist/ is up to date with src/.
import { mkdirSync, mkdtempSync, rmSync, utimesSync, writeFileSync } from 'node:fs'
import { tmpdir } from 'node:os'
import { join } from 'node:path'
import { afterEach, describe, expect, it } from 'vitest'
import { staleOutputs } from './build-dist.js'

describe('staleOutputs', () => {
  const dirs: string[] = []
  afterEach(() => {
    for (const d of dirs.splice(0)) rmSync(d, { recursive: true, force: true })
  })

  it('names the sources whose output is missing or older, and no declaration file', () => {
    const top = mkdtempSync(join(tmpdir(), 'build-dist-'))
    dirs.push(top)
    const src = join(top, 'src')
    const dist = join(top, 'dist')
    mkdirSync(join(src, 'a'), { recursive: true })
    mkdirSync(join(dist, 'a'), { recursive: true })
    const at = (file: string, seconds: number) => {
      writeFileSync(file, '')
      utimesSync(file, seconds, seconds)
    }
    at(join(src, 'fresh.ts'), 100)
    at(join(dist, 'fresh.js'), 200)
    at(join(src, 'a', 'edited.ts'), 300)
    at(join(dist, 'a', 'edited.js'), 200)
    at(join(src, 'new.ts'), 100)
    at(join(src, 'types.d.ts'), 300)
    expect(staleOutputs(src, dist).map((f) => f.slice(src.length + 1))).toEqual([join('a', 'edited.ts'), 'new.ts'])
    at(join(dist, 'a', 'edited.js'), 300)
    at(join(dist, 'new.js'), 300)
    expect(staleOutputs(src, dist)).toEqual([])
  })
})
