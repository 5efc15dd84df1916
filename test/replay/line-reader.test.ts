import { createReadStream, mkdtempSync, readdirSync, readlinkSync, rmSync, writeFileSync } from 'node:fs'
import { tmpdir } from 'node:os'
import { join } from 'node:path'
import { createInterface } from 'node:readline'
import { afterAll, describe, expect, it } from 'vitest'
import { readLinesSync } from '../../src/replay/line-reader.js'

const dir = mkdtempSync(join(tmpdir(), 'pr-lines-'))
afterAll(() => rmSync(dir, { recursive: true, force: true }))

async function viaReadline(path: string): Promise<string[]> {
  const out: string[] = []
  for await (const l of createInterface({ input: createReadStream(path, { encoding: 'utf8' }), crlfDelay: Infinity })) out.push(l)
  return out
}

describe('readLinesSync', () => {
  it('splits lines as readline does, whatever the chunk boundaries', async () => {
    const contents = [
      'a\nb\n',
      'a\nb',
      '\n\nx\n\n',
      'one\r\ntwo\r\n\r\nthree',
      'lone\rcarriage\r',
      'é€😀\nmulti-byte ✓ across chunks\n'.repeat(5),
      '',
      '{"timestamp": 1}\r',
    ]
    for (const [i, text] of contents.entries()) {
      const p = join(dir, `f${i}.txt`)
      writeFileSync(p, text)
      const expected = await viaReadline(p)
      for (const chunk of [1, 2, 3, 5, 7, 64, 1 << 20]) expect([...readLinesSync(p, chunk)], `${JSON.stringify(text)} / ${chunk}`).toEqual(expected)
    }
  })

  it.runIf(process.platform === 'linux')('closes the file when the reader stops early', () => {
    const p = join(dir, 'long.txt')
    writeFileSync(p, 'line\n'.repeat(1000))
    // Descriptors on this file only: the worker's other descriptors come and go with other tests.
    const open = (): number =>
      readdirSync('/proc/self/fd').filter((fd) => {
        try {
          return readlinkSync(`/proc/self/fd/${fd}`) === p
        } catch {
          return false
        }
      }).length
    let seen = 0
    for (let i = 0; i < 50; i++) {
      for (const l of readLinesSync(p, 16)) {
        expect(l).toBe('line')
        seen = Math.max(seen, open())
        break
      }
    }
    // The check can see an open file: it did while the reader was on its first line.
    expect(seen).toBe(1)
    expect(open()).toBe(0)
  })
})
