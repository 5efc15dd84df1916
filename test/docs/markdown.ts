// What the docs test reads out of Markdown and out of `--help`: headings as GitHub names their
// anchors, relative links, and the flag reference entries. Kept apart from the test so that
// the test can also run each reader on small made-up inputs and see it fail where it should.
import { existsSync, readFileSync, statSync } from 'node:fs'
import path from 'node:path'

/** The lines of a Markdown text outside fenced code blocks, with their 1-based numbers. */
export function proseLines(text: string): { line: string; n: number }[] {
  const out: { line: string; n: number }[] = []
  let fence: string | undefined
  text.split('\n').forEach((line, i) => {
    const m = /^ {0,3}(`{3,}|~{3,})/.exec(line)
    if (m) {
      if (fence === undefined) fence = m[1]![0]!.repeat(m[1]!.length)
      else if (m[1]!.startsWith(fence)) fence = undefined
      return
    }
    if (fence === undefined) out.push({ line, n: i + 1 })
  })
  return out
}

/** A heading's text as GitHub renders it before slugging: link targets and markup dropped. */
function headingText(raw: string): string {
  return raw
    .replace(/!?\[([^\]]*)\]\([^)]*\)/g, '$1')
    .replace(/<[^>]+>/g, '')
    .trim()
}

/**
 * GitHub's anchor for a heading (github-slugger): lowercase, every character that is not a
 * letter, a mark, a digit, a connector (`_`), a hyphen or a space dropped, spaces to hyphens.
 */
export function slugBase(heading: string): string {
  return headingText(heading)
    .toLowerCase()
    .replace(/[^\p{L}\p{M}\p{N}\p{Pc} -]/gu, '')
    .replace(/ /g, '-')
}

/** Every anchor of a Markdown text: its headings' slugs (repeats get -1, -2 …) and explicit `<a id>`/`<a name>`. */
export function anchors(text: string): Set<string> {
  const seen = new Set<string>()
  for (const { line } of proseLines(text)) {
    const h = /^ {0,3}#{1,6}\s+(.*?)\s*#*\s*$/.exec(line)
    if (h) {
      const base = slugBase(h[1]!)
      let slug = base
      for (let i = 1; seen.has(slug); i++) slug = `${base}-${i}`
      seen.add(slug)
    }
    for (const a of line.matchAll(/<a\s+(?:id|name)="([^"]+)"/g)) seen.add(a[1]!)
  }
  return seen
}

export interface Link {
  file: string
  line: number
  target: string
}

/** Inline links and images, and reference definitions, outside code blocks and code spans. */
export function links(text: string, file: string): Link[] {
  const out: Link[] = []
  for (const { line, n } of proseLines(text)) {
    const prose = line.replace(/(`+)[^`]*?\1/g, (s) => ' '.repeat(s.length))
    const def = /^ {0,3}\[[^\]]+\]:\s*(\S+)/.exec(prose)
    if (def) out.push({ file, line: n, target: def[1]! })
    // [text](target) where the text may hold code spans (blanked above) and the target no spaces.
    for (const m of prose.matchAll(/\]\(\s*<?([^)\s>]+)>?(?:\s+"[^"]*")?\s*\)/g)) out.push({ file, line: n, target: m[1]! })
  }
  return out
}

/** Why a relative link does not resolve, or undefined when it does (external links are not followed). */
export function brokenLink(link: Link, read: (file: string) => string = (f) => readFileSync(f, 'utf8')): string | undefined {
  if (/^[a-z][a-z0-9+.-]*:/i.test(link.target)) return undefined
  const [rawPath, anchor] = link.target.split('#', 2) as [string, string | undefined]
  const file = rawPath === '' ? link.file : path.resolve(path.dirname(link.file), decodeURIComponent(rawPath))
  if (!existsSync(file)) return `${link.target}: no file ${file}`
  if (anchor === undefined) return undefined
  if (anchor === '') return `${link.target}: an empty anchor`
  if (!file.endsWith('.md')) {
    return /^L\d+(-L\d+)?$/.test(anchor) && statSync(file).isFile() ? undefined : `${link.target}: an anchor in a file that is not Markdown`
  }
  return anchors(read(file)).has(anchor) ? undefined : `${link.target}: no heading with the anchor #${anchor} in ${file}`
}

/** The long flags a `--help` text defines, by scope: '' for the command's own, else the workload or shape whose knobs they are. */
export function helpFlags(help: string): Map<string, string[]> {
  const out = new Map<string, string[]>()
  let scope = ''
  let knobs = false
  for (const line of help.split('\n')) {
    if (/knobs:$/.test(line)) {
      knobs = true
      continue
    }
    const s = knobs ? /^ {2}([a-z][a-z0-9-]*): /.exec(line) : null
    if (s) {
      scope = s[1]!
      continue
    }
    // A definition starts near the margin; a description's continuation lines are indented
    // to its column, so a flag named there ("adds to\n   --upstream)") is not one.
    const d = /^ {2,8}(-.*)$/.exec(line)
    if (!d) continue
    const left = d[1]!.split(/ {2,}/)[0]!
    const list = out.get(scope) ?? []
    for (const m of left.matchAll(/--([a-z0-9]+(?:-[a-z0-9]+)*)(?![\w*-])/g)) list.push(m[1]!)
    out.set(scope, list)
  }
  return out
}

/**
 * A flag reference entry: a body row of a table right below a `<!-- flags: COMMAND [SCOPE] -->`
 * marker (optionally `; inherits BASE`); the row's first cell names the flags it documents.
 */
export interface FlagTable {
  file: string
  line: number
  command: string
  scope: string
  inherits: string | undefined
  flags: string[]
}

export function flagTables(text: string, file: string): FlagTable[] {
  const lines = text.split('\n')
  const out: FlagTable[] = []
  lines.forEach((line, i) => {
    const m = /^\s*<!--\s*flags:\s*([a-z][a-z0-9-]*)(?:\s+([a-z][a-z0-9-]*))?\s*(?:;\s*inherits\s+([a-z][a-z0-9-]*))?\s*-->\s*$/.exec(line)
    if (!m) return
    let j = i + 1
    while (j < lines.length && lines[j]!.trim() === '') j++
    const flags: string[] = []
    // The header row and the delimiter row, then the body.
    for (let k = j + 2; k < lines.length && lines[k]!.trimStart().startsWith('|'); k++) {
      const first = lines[k]!.trimStart().slice(1).split(/(?<!\\)\|/)[0]!
      for (const f of first.matchAll(/`--([a-z0-9]+(?:-[a-z0-9]+)*)(?![\w*-])/g)) flags.push(f[1]!)
    }
    out.push({ file, line: i + 1, command: m[1]!, scope: m[2] ?? '', inherits: m[3], flags })
  })
  return out
}

/**
 * What is wrong with the reference entries of one command's flags (empty when each flag its
 * `--help` prints has exactly one entry and every entry names a flag it prints). A command that
 * inherits another's table takes the base's entries for flags it has no entry of its own for.
 */
export function flagProblems(command: string, help: Map<string, string[]>, tables: FlagTable[]): string[] {
  const own = tables.filter((t) => t.command === command)
  const bases = new Set(own.map((t) => t.inherits).filter((b): b is string => b !== undefined))
  if (bases.size > 1) return [`${command}: inherits more than one command's table (${[...bases].join(', ')})`]
  const base = [...bases][0]
  const problems: string[] = []
  const where = (t: FlagTable) => `${path.basename(t.file)}:${t.line}`
  const scopes = new Set([...help.keys(), ...own.map((t) => t.scope)])
  for (const scope of scopes) {
    const label = scope === '' ? command : `${command} (${scope})`
    const printed = new Set(help.get(scope) ?? [])
    const entries = new Map<string, string[]>()
    const note = (t: FlagTable) => {
      for (const f of t.flags) entries.set(f, [...(entries.get(f) ?? []), where(t)])
    }
    own.filter((t) => t.scope === scope).forEach(note)
    for (const [f, at] of entries) if (!printed.has(f)) problems.push(`${label}: --${f} has an entry (${at.join(', ')}) but --help does not print it`)
    const inherited = new Map<string, string[]>()
    if (scope === '' && base !== undefined) {
      for (const t of tables.filter((t) => t.command === base && t.scope === '')) for (const f of t.flags) inherited.set(f, [...(inherited.get(f) ?? []), where(t)])
    }
    for (const f of printed) {
      const at = [...(entries.get(f) ?? []), ...(inherited.get(f) ?? [])]
      if (at.length === 0) problems.push(`${label}: --${f} is printed by --help but has no reference entry`)
      else if (at.length > 1) problems.push(`${label}: --${f} has ${at.length} reference entries (${at.join(', ')})`)
    }
  }
  return problems
}
