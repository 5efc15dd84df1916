// The README and docs/ hold together: every relative link and anchor resolves, every flag a
// command's --help prints has exactly one reference entry, and docs/index.md reaches every page.
// The readers are run on made-up inputs first, so that a checker that cannot fail is caught.
import { spawnSync } from 'node:child_process'
import { existsSync, mkdtempSync, readdirSync, readFileSync, rmSync, writeFileSync } from 'node:fs'
import { tmpdir } from 'node:os'
import path from 'node:path'
import { fileURLToPath } from 'node:url'
import { afterAll, describe, expect, it } from 'vitest'
import { anchors, brokenLink, flagProblems, flagTables, helpFlags, links, slugBase } from './markdown.js'

const root = fileURLToPath(new URL('../../', import.meta.url))
const docsDir = path.join(root, 'docs')
const pages = [path.join(root, 'README.md'), ...readdirSync(docsDir).filter((f) => f.endsWith('.md')).sort().map((f) => path.join(docsDir, f))]
const read = (file: string) => readFileSync(file, 'utf8')
const cli = path.join(root, 'dist/cli.js')

describe('the readers, on made-up inputs', () => {
  it("slug headings as GitHub does: lowercase, punctuation dropped, spaces to '-', repeats numbered", () => {
    expect(slugBase('Using every core: `--workers`')).toBe('using-every-core---workers')
    expect(slugBase('Behind a Gateway API inference gateway (endpoint picker)')).toBe('behind-a-gateway-api-inference-gateway-endpoint-picker')
    expect(slugBase('Traces: `--trace FILE.jsonl`, OpenAI bodies (`--trace-format openai`, the default)')).toBe('traces---trace-filejsonl-openai-bodies---trace-format-openai-the-default')
    expect(slugBase("The endpoint picker's bounds")).toBe('the-endpoint-pickers-bounds')
    expect(slugBase('`longest_prefix` 1–2 × [link](x.md) µs')).toBe('longest_prefix-12--link-µs')
    const text = '# Flags\n## Flags\n```sh\n# Flags\n```\n### Flags\n<a id="custom"></a>\n'
    expect([...anchors(text)]).toEqual(['flags', 'flags-1', 'flags-2', 'custom'])
  })

  describe('links', () => {
    const dir = mkdtempSync(path.join(tmpdir(), 'docs-links-'))
    afterAll(() => rmSync(dir, { recursive: true, force: true }))
    writeFileSync(path.join(dir, 'a.md'), '# A\n## Same\n## Same\n')
    writeFileSync(path.join(dir, 'code.cfg'), 'x\n')
    const check = (md: string) => links(md, path.join(dir, 'index.md')).map((l) => brokenLink(l)).filter((p) => p !== undefined)

    it('resolve files and anchors, numbered repeats included, and pass external ones', () => {
      expect(check('[a](a.md) [s](a.md#same) [s1](a.md#same-1) [e](https://example.com/x#y) [c](code.cfg) [l](code.cfg#L2)')).toEqual([])
      writeFileSync(path.join(dir, 'index.md'), '# Top\n[self](#top)\n')
      expect(check(read(path.join(dir, 'index.md')))).toEqual([])
    })

    it('find a missing file, a missing anchor, a repeat past the last, an anchor in a code file', () => {
      expect(check('[x](missing.md)')).toEqual([expect.stringContaining('no file')])
      expect(check('[x](a.md#nope)')).toEqual([expect.stringContaining('#nope')])
      expect(check('[x](a.md#same-2)')).toEqual([expect.stringContaining('#same-2')])
      expect(check('[x](code.cfg#top)')).toEqual([expect.stringContaining('not Markdown')])
      expect(check('[x](a.md#)')).toEqual([expect.stringContaining('empty anchor')])
    })

    it('read links whose text is code, and reference definitions; not links in code', () => {
      const md = '[`deploy/x.cfg`](missing.cfg)\n[ref]: gone.md\n`[not](a-link.md)`\n```\n[nor](this.md)\n```\n![img](pic.png)\n'
      expect(links(md, 'f.md').map((l) => l.target)).toEqual(['missing.cfg', 'gone.md', 'pic.png'])
    })
  })

  describe('flags', () => {
    const help = [
      'usage: x serve [options]',
      '',
      '  --upstream URL        an instance (repeat; adds to',
      '                        --upstream-dns) [ENV]',
      '  --ttft-slo D, --tpot-slo D   the SLOs',
      '  --help, -h            this text',
      '',
      'workloads and their knobs:',
      '  long-context: documents',
      '      --rate            requests per second',
      '  chat: chats',
      '      --rate            requests per second',
      '      --turns           turns',
    ].join('\n')

    it('read the flags a --help defines by scope, not those named in a description', () => {
      expect(Object.fromEntries(helpFlags(help))).toEqual({ '': ['upstream', 'ttft-slo', 'tpot-slo', 'help'], 'long-context': ['rate'], chat: ['rate', 'turns'] })
    })

    const table = (marker: string, rows: string[]) => [marker, '', '| Flag | Meaning |', '| --- | --- |', ...rows.map((r) => `| ${r} | x |`), ''].join('\n')
    const complete = [
      table('<!-- flags: serve -->', ['`--upstream URL`', '`--ttft-slo D`, `--tpot-slo D`', '`--help`, `-h`']),
      table('<!-- flags: serve long-context -->', ['`--rate`']),
      table('<!-- flags: serve chat -->', ['`--rate`', '`--turns`', '`--fault-*`']),
    ].join('\n')

    it('accept one entry per flag and scope', () => {
      expect(flagProblems('serve', helpFlags(help), flagTables(complete, 'c.md'))).toEqual([])
    })

    it('find a flag with no entry, one with two, and an entry for a flag --help does not print', () => {
      const missing = complete.replace('| `--turns` | x |\n', '')
      expect(flagProblems('serve', helpFlags(help), flagTables(missing, 'c.md'))).toEqual(['serve (chat): --turns is printed by --help but has no reference entry'])
      const twice = `${complete}\n${table('<!-- flags: serve -->', ['`--upstream URL`'])}`
      expect(flagProblems('serve', helpFlags(help), flagTables(twice, 'c.md'))).toEqual([expect.stringMatching(/^serve: --upstream has 2 reference entries/)])
      const stale = `${complete}\n${table('<!-- flags: serve -->', ['`--gone N`'])}`
      expect(flagProblems('serve', helpFlags(help), flagTables(stale, 'c.md'))).toEqual([expect.stringMatching(/^serve: --gone has an entry .* but --help does not print it/)])
      expect(flagProblems('serve', helpFlags(help), [])).toHaveLength(7)
    })

    it("take an inherited table's entries, and count one documented in both as two", () => {
      const eppHelp = helpFlags('  --upstream URL   x\n  --grpc-port N    y\n')
      const base = table('<!-- flags: serve -->', ['`--upstream URL`', '`--host H`'])
      expect(flagProblems('epp', eppHelp, flagTables(`${base}\n${table('<!-- flags: epp; inherits serve -->', ['`--grpc-port N`'])}`, 'c.md'))).toEqual([])
      const both = `${base}\n${table('<!-- flags: epp; inherits serve -->', ['`--grpc-port N`', '`--upstream URL`'])}`
      expect(flagProblems('epp', eppHelp, flagTables(both, 'c.md'))).toEqual([expect.stringMatching(/^epp: --upstream has 2 reference entries/)])
      expect(flagProblems('epp', eppHelp, flagTables(table('<!-- flags: epp -->', ['`--grpc-port N`']), 'c.md'))).toEqual(['epp: --upstream is printed by --help but has no reference entry'])
    })
  })
})

describe('README.md and docs/', () => {
  it('every relative link and anchor resolves', () => {
    const problems = pages.flatMap((file) => links(read(file), file).flatMap((l) => {
      const why = brokenLink(l)
      return why === undefined ? [] : [`${path.relative(root, l.file)}:${l.line}: ${why}`]
    }))
    expect(problems).toEqual([])
  })

  it('docs/index.md links every page of docs/, and the README links the index', () => {
    const index = path.join(docsDir, 'index.md')
    const linked = new Set(links(read(index), index).map((l) => path.resolve(docsDir, l.target.split('#')[0]!)))
    expect(pages.filter((p) => p !== index && !linked.has(p)).map((p) => path.relative(root, p))).toEqual([])
    expect(links(read(pages[0]!), pages[0]!).map((l) => l.target)).toContain('docs/index.md')
  })

  it('the README stays a page a newcomer reads to the end', () => {
    expect(read(pages[0]!).split('\n').length).toBeLessThanOrEqual(400)
  })

  it('name no internal notes, sibling folders or issue numbers', () => {
    const found = pages.flatMap((file) =>
      read(file)
        .split('\n')
        .flatMap((line, i) => (/DESIGN\.md|\.\.\/shared|\bissue\s*#?\d+|(^|[\s(])#\d+\b/i.test(line) ? [`${path.relative(root, file)}:${i + 1}: ${line.trim()}`] : [])),
    )
    expect(found).toEqual([])
  })

  it('docs/layout.md names every folder of src/ and native/, and none that is gone', () => {
    const folders = (dir: string): string[] =>
      readdirSync(path.join(root, dir), { withFileTypes: true })
        .filter((d) => d.isDirectory())
        .flatMap((d) => [`${dir}/${d.name}/`, ...folders(`${dir}/${d.name}`)])
    const actual = ['src/', 'native/', ...folders('src'), ...folders('native')].sort()
    const named = [...new Set([...read(path.join(docsDir, 'layout.md')).matchAll(/`((?:src|native)\/(?:[\w.-]+\/)*)`/g)].map((m) => m[1]!))].sort()
    expect({ missing: actual.filter((f) => !named.includes(f)), gone: named.filter((f) => !actual.includes(f)) }).toEqual({ missing: [], gone: [] })
  })

  it("every flag each command's --help prints is documented exactly once in docs/", () => {
    expect(existsSync(cli), `${cli} is missing: run npx tsc -p tsconfig.build.json (npm test builds it first)`).toBe(true)
    const usage = spawnSync(process.execPath, [cli, '--help'], { encoding: 'utf8' })
    expect(usage.status, usage.stderr).toBe(0)
    const commands = [...usage.stdout.slice(usage.stdout.indexOf('commands:')).matchAll(/^ {2}([a-z][a-z-]*) /gm)].map((m) => m[1]!)
    expect(commands).toEqual(expect.arrayContaining(['serve', 'epp', 'sim', 'replay', 'route', 'hash', 'info']))
    const tables = pages.slice(1).flatMap((file) => flagTables(read(file), file))
    // A marker with no table below it documents nothing, and a table for a command that does not exist is a stale one.
    expect(tables.filter((t) => t.flags.length === 0).map((t) => `${path.relative(root, t.file)}:${t.line}`)).toEqual([])
    expect(tables.filter((t) => !commands.includes(t.command)).map((t) => `${path.relative(root, t.file)}:${t.line} ${t.command}`)).toEqual([])
    const problems = commands.flatMap((command) => {
      const r = spawnSync(process.execPath, [cli, command, '--help'], { encoding: 'utf8' })
      if (r.status !== 0) return [`${command} --help: exit ${r.status}: ${r.stderr.trim()}`]
      return flagProblems(command, helpFlags(r.stdout), tables)
    })
    expect(problems).toEqual([])
  })
})
