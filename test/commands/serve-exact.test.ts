// serve's exact-view settings from the command line: what is wrong is named, in one line, exit 2.
import { spawnSync } from 'node:child_process'
import { mkdtempSync, rmSync, writeFileSync } from 'node:fs'
import { tmpdir } from 'node:os'
import { join } from 'node:path'
import { fileURLToPath } from 'node:url'
import { afterAll, describe, expect, it } from 'vitest'

const cli = fileURLToPath(new URL('../../dist/cli.js', import.meta.url))
const dir = mkdtempSync(join(tmpdir(), 'pr-serve-exact-'))
afterAll(() => rmSync(dir, { recursive: true, force: true }))

// The instance is never reached: every case fails before the fleet is probed or the port opens.
const base = ['serve', '--upstream', 'http://127.0.0.1:9', '--strategy', 'longest_prefix', '--port', '0', '--admin-port', '0', '--warmup-requests', '0']
const run = (args: string[]) => spawnSync(process.execPath, [cli, ...base, ...args], { encoding: 'utf8', timeout: 60_000 })

describe('serve --kv-events-port / --tokenizer errors', () => {
  it('a tokenizer file that does not load stops the start, naming the file', () => {
    writeFileSync(join(dir, 'tokenizer.json'), '{ not json')
    const r = run(['--kv-events-port', '+500', '--tokenizer', 'local', '--tokenizer-path', dir])
    expect(r.status).toBe(2)
    expect(r.stderr).toContain(join(dir, 'tokenizer.json'))
    expect(r.stderr).not.toMatch(/\n\s+at /) // no stack trace
    const missing = run(['--kv-events-port', '+500', '--tokenizer', 'local', '--tokenizer-path', join(dir, 'nope')])
    expect(missing.status).toBe(2)
    expect(missing.stderr).toContain(join(dir, 'nope'))
  })

  it('bad values name the flag and what was given', () => {
    const port = run(['--kv-events-port', 'x500'])
    expect(port.status).toBe(2)
    expect(port.stderr).toMatch(/kvEvents\.port: .*"x500" \(from --kv-events-port\)/)
    const mode = run(['--kv-events-port', '5557', '--tokenizer', 'guess'])
    expect(mode.status).toBe(2)
    expect(mode.stderr).toMatch(/tokenizer\.mode.*\(from --tokenizer\)/)
    const path = run(['--kv-events-port', '5557', '--tokenizer', 'local'])
    expect(path.status).toBe(2)
    expect(path.stderr).toMatch(/--tokenizer-path/)
    const ranks = run(['--kv-events-port', '5557', '--kv-events-dp-ranks', '0'])
    expect(ranks.status).toBe(2)
    expect(ranks.stderr).toMatch(/kvEvents\.dataParallelRanks.*--kv-events-dp-ranks/)
  })
})
