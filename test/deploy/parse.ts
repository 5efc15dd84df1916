// Just enough of the Dockerfile and PromQL grammars for test/deploy/deploy.test.ts to read what the
// deployment kit refers to: the files an image copies, the command it runs, the metrics a
// dashboard queries.

export interface Instruction {
  /** Upper case: FROM, COPY, RUN... */
  op: string
  /** The rest of the line, continuations joined. */
  rest: string
  /** 0-based index of the stage (FROM) it belongs to. */
  stage: number
}

export function parseDockerfile(text: string): Instruction[] {
  const out: Instruction[] = []
  let stage = -1
  let pending = ''
  for (const line of text.split('\n')) {
    if (/^\s*#/.test(line) && pending === '') continue
    if (/^\s*#/.test(line)) continue // a comment inside a continued instruction
    const joined = pending + line
    if (/\\\s*$/.test(line)) {
      pending = joined.replace(/\\\s*$/, ' ')
      continue
    }
    pending = ''
    const m = /^\s*([A-Za-z]+)\s+(.*)$/.exec(joined)
    if (!m) continue
    const op = m[1]!.toUpperCase()
    if (op === 'FROM') stage++
    out.push({ op, rest: m[2]!.trim(), stage })
  }
  return out
}

/** An instruction's arguments: the JSON (exec) form as it is, the shell form split on blanks. */
export function instructionArgs(rest: string): { exec: boolean; args: string[] } {
  if (rest.startsWith('[')) return { exec: true, args: JSON.parse(rest) as string[] }
  return { exec: false, args: rest.split(/\s+/).filter(Boolean) }
}

/** COPY/ADD: the --flags, then sources and the destination. */
export function copyParts(rest: string): { flags: Record<string, string>; sources: string[]; dest: string } {
  const { args } = instructionArgs(rest)
  const flags: Record<string, string> = {}
  while (args[0]?.startsWith('--')) {
    const [k, v = ''] = args.shift()!.slice(2).split('=', 2)
    flags[k!] = v
  }
  return { flags, sources: args.slice(0, -1), dest: args[args.length - 1]! }
}

/** ENV: both `ENV A=1 B=2` and the old `ENV A 1`. */
export function envNames(rest: string): string[] {
  if (!rest.includes('=')) return [rest.split(/\s+/)[0]!]
  return [...rest.matchAll(/(?:^|\s)([A-Za-z_][A-Za-z0-9_]*)=/g)].map((m) => m[1]!)
}

/** Whether a .dockerignore pattern list keeps `path` (relative, no leading ./) out of the context. */
export function ignored(patterns: readonly string[], path: string): boolean {
  const clean = path.replace(/^\.\//, '').replace(/\/+$/, '')
  const parts = clean.split('/')
  const candidates = parts.map((_, i) => parts.slice(0, i + 1).join('/'))
  let out = false
  for (const raw of patterns) {
    const negate = raw.startsWith('!')
    const p = (negate ? raw.slice(1) : raw).replace(/^\.?\//, '').replace(/\/+$/, '')
    const re = new RegExp(
      `^${p
        .split(/(\*\*\/|\*\*|\*|\?)/)
        .map((s) => (s === '**/' ? '(?:.*/)?' : s === '**' ? '.*' : s === '*' ? '[^/]*' : s === '?' ? '[^/]' : s.replace(/[.+^${}()|[\]\\]/g, '\\$&')))
        .join('')}$`,
    )
    if (candidates.some((c) => re.test(c))) out = !negate
  }
  return out
}

const PROMQL_WORDS = new Set(['by', 'without', 'on', 'ignoring', 'group_left', 'group_right', 'bool', 'and', 'or', 'unless', 'offset', 'inf', 'nan'])

/**
 * The metric names a PromQL expression selects. Grafana's $variables, strings, label matchers,
 * grouping clauses and ranges are removed first; an identifier followed by `(` is a function.
 */
export function promqlMetricNames(expr: string): string[] {
  let s = expr
    .replace(/"(?:[^"\\]|\\.)*"|'(?:[^'\\]|\\.)*'/g, '""')
    .replace(/\$\{[^}]*\}|\$\w+/g, ' ')
    .replace(/\{[^}]*\}/g, ' ')
    .replace(/\[[^\]]*\]/g, ' ')
  s = s.replace(/\b(by|without|on|ignoring|group_left|group_right)\s*\([^)]*\)/g, ' ')
  const names = new Set<string>()
  for (const m of s.matchAll(/(?<![A-Za-z0-9_:.])[A-Za-z_:][A-Za-z0-9_:]*/g)) {
    const after = s.slice(m.index + m[0].length).trimStart()
    if (after.startsWith('(')) continue
    if (PROMQL_WORDS.has(m[0].toLowerCase())) continue
    names.add(m[0])
  }
  return [...names]
}

/** `# TYPE name kind` lines of a Prometheus text exposition. */
export function exposedMetrics(text: string): Map<string, string> {
  return new Map([...text.matchAll(/^# TYPE (\S+) (\S+)$/gm)].map((m) => [m[1]!, m[2]!]))
}

/** Whether `name` is something a scrape of those metrics holds: a family, or a histogram's or summary's series. */
export function isExposed(metrics: Map<string, string>, name: string): boolean {
  if (metrics.has(name)) return true
  const m = /^(.*)_(bucket|sum|count)$/.exec(name)
  if (!m) return false
  const kind = metrics.get(m[1]!)
  return kind === 'histogram' || (kind === 'summary' && m[2] !== 'bucket')
}
