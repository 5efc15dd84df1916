// The flag table is the one source of serve's flags, variables and --help; these check that
// what is derived from it, and what docs/configuration.md says about it, agree with it.
import { spawn } from 'node:child_process'
import { readFileSync } from 'node:fs'
import { fileURLToPath } from 'node:url'
import { describe, expect, it } from 'vitest'
import { ENV_PREFIX, FLAGS, parseArgsOptions } from '../../src/commands/flags.js'
import { suggest } from '../../src/config/suggest.js'

const cli = fileURLToPath(new URL('../../dist/cli.js', import.meta.url))
const reference = readFileSync(fileURLToPath(new URL('../../docs/configuration.md', import.meta.url)), 'utf8')

describe('the flag table', () => {
  it('has one flag and one variable per row, each variable with the common prefix', () => {
    expect(new Set(FLAGS.map((f) => f.name)).size).toBe(FLAGS.length)
    expect(new Set(FLAGS.map((f) => f.env)).size).toBe(FLAGS.length)
    for (const f of FLAGS) expect(f.env.startsWith(ENV_PREFIX), f.env).toBe(true)
    expect(Object.keys(parseArgsOptions(FLAGS))).toEqual(FLAGS.map((f) => f.name))
  })

  it('serve --help lists every flag with its variable', async () => {
    const c = spawn(process.execPath, [cli, 'serve', '--help'])
    let out = ''
    c.stdout.on('data', (d: Buffer) => (out += d.toString()))
    expect(await new Promise((r) => c.once('close', r))).toBe(0)
    for (const f of FLAGS) expect(out).toMatch(new RegExp(`\\n {2}--${f.name}\\b[^]*?\\[${f.env}\\]`))
  })

  it("docs/configuration.md's flags table is the table: the same flags, each with its variable", () => {
    const start = reference.indexOf('## Flags\n')
    expect(start).toBeGreaterThan(-1)
    const section = reference.slice(start, reference.indexOf('**Errors at start.**', start))
    const rows = section.split('\n').filter((l) => l.startsWith('| `-'))
    const documented = new Map(rows.map((r) => [/`--([a-z-]+)/.exec(r)![1]!, /PREFIX_ROUTER_[A-Z_]+/.exec(r)?.[0]]))
    expect([...documented.keys()].sort()).toEqual([...FLAGS.map((f) => f.name), 'help', 'version'].sort())
    for (const f of FLAGS) expect(documented.get(f.name), f.name).toBe(f.env)
  })
})

describe('did you mean', () => {
  it('finds a missing letter, a swapped pair, a prefix; and nothing for a stranger', () => {
    const envs = FLAGS.map((f) => f.env.slice(ENV_PREFIX.length))
    expect(suggest('UPSTREAM', envs)).toBe('UPSTREAMS')
    expect(suggest('PORT', envs)).toBe('PORT')
    expect(suggest('stratgey', FLAGS.map((f) => f.name))).toBe('strategy')
    expect(suggest('sim', FLAGS.map((f) => f.name))).toBe('sim-instances')
    expect(suggest('frobnicate', FLAGS.map((f) => f.name))).toBeUndefined()
  })
})
