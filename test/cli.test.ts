import { execFileSync, spawnSync } from 'node:child_process'
import { randomBytes } from 'node:crypto'
import { mkdtempSync, readFileSync, rmSync, writeFileSync } from 'node:fs'
import { tmpdir } from 'node:os'
import { join } from 'node:path'
import { fileURLToPath } from 'node:url'
import { afterAll, describe, expect, it } from 'vitest'

const cli = fileURLToPath(new URL('../dist/cli.js', import.meta.url))
const dir = mkdtempSync(join(tmpdir(), 'pr-cli-'))
afterAll(() => rmSync(dir, { recursive: true, force: true }))

const run = (args: string[], input?: string) => spawnSync(process.execPath, [cli, ...args], { encoding: 'utf8', input })

describe('prefix-router hash', () => {
  it('prints what xxhsum -H3 prints for files', () => {
    const files = [0, 17, 240, 241, 5000].map((n, i) => {
      const f = join(dir, `f${i}`)
      writeFileSync(f, randomBytes(n))
      return f
    })
    const ours = run(['hash', ...files])
    expect(ours.status).toBe(0)
    expect(ours.stdout).toBe(execFileSync('xxhsum', ['-H3', ...files], { encoding: 'utf8' }))
  })

  it('reads stdin and takes a seed', () => {
    const a = run(['hash'], 'hello')
    const b = run(['hash', '--seed', '0x10'], 'hello')
    const c = run(['hash', '--seed', '16'], 'hello')
    expect(a.stdout).toMatch(/^XXH3 \(stdin\) = [0-9a-f]{16}\n$/)
    expect(b.stdout).not.toBe(a.stdout)
    expect(c.stdout).toBe(b.stdout)
  })

  it('names the bad value and exits 2', () => {
    const bad = run(['hash', '--seed', 'banana'])
    expect(bad.status).toBe(2)
    expect(bad.stderr).toBe("prefix-router: --seed must be an integer from 0 to 2^64-1; got 'banana'\n")
    const missing = run(['hash', join(dir, 'nope')])
    expect(missing.status).toBe(2)
    expect(missing.stderr).toMatch(/cannot read '.*nope': ENOENT/)
  })
})

describe('prefix-router', () => {
  it('lists commands and rejects unknown ones', () => {
    expect(run(['--help']).stdout).toMatch(/usage: prefix-router <command>/)
    const bad = run(['frobnicate'])
    expect(bad.status).toBe(2)
    expect(bad.stderr).toMatch(/unknown command 'frobnicate'\n/)
    expect(run(['serv']).stderr).toMatch(/^prefix-router: unknown command 'serv'; did you mean serve\?\n/)
  })

  it('info reports the SIMD path and the sources hash', () => {
    const info = JSON.parse(run(['info']).stdout) as { simd: string; sourcesHash: string }
    expect(['scalar', 'sse2', 'avx2', 'neon']).toContain(info.simd)
    expect(info.sourcesHash).toMatch(/^[0-9a-f]{64}$/)
  })
})

describe('the bin', () => {
  // The shebang carries a V8 flag (see src/cli.ts); a typo there would break `npx prefix-router`.
  const shebang = readFileSync(cli, 'utf8').split('\n', 1)[0]!

  it('starts through its shebang line, as the kernel runs it', () => {
    expect(shebang).toMatch(/^#!\/usr\/bin\/env -S node /)
    const [interpreter, ...args] = shebang.slice(2).split(' ')
    const r = spawnSync(interpreter!, [...args, cli, 'info'], { encoding: 'utf8' })
    expect(r.stderr).toBe('')
    expect(r.status).toBe(0)
    expect(r.stdout).toContain('simd')
  })

  it('npm start passes the same V8 flags, and --demo: a first run needs no fleet of its own', () => {
    const pkg = JSON.parse(readFileSync(fileURLToPath(new URL('../package.json', import.meta.url)), 'utf8')) as { scripts: Record<string, string> }
    const flags = shebang.split(' ').filter((a) => a.startsWith('--'))
    expect(flags.length).toBeGreaterThan(0)
    expect(pkg.scripts.start).toBe(`node ${flags.join(' ')} dist/cli.js serve --demo`)
  })

  it('--version and -v print the package version, for the CLI and for serve', () => {
    const { version } = JSON.parse(readFileSync(fileURLToPath(new URL('../package.json', import.meta.url)), 'utf8')) as { version: string }
    for (const args of [['--version'], ['-v'], ['serve', '--version'], ['serve', '-v']]) {
      const r = run(args)
      expect(r.status, args.join(' ')).toBe(0)
      expect(r.stdout).toBe(`${version}\n`)
    }
  })
})
