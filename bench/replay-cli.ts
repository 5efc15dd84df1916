// What the replay benchmarks share: the built CLI run as a user runs it, a replay's JSON
// result read back, the PASS/FAIL checks they print and count, and env-var filters.
import { execFileSync } from 'node:child_process'
import { mkdtempSync, readFileSync, rmSync } from 'node:fs'
import { cpus, tmpdir } from 'node:os'
import { join } from 'node:path'
import { fileURLToPath } from 'node:url'
import type { ReplayResult } from '../src/replay/result.js'

const root = fileURLToPath(new URL('..', import.meta.url))

/** A scratch folder for traces and results, removed by `finish`. */
export function scratch(prefix: string): string {
  return mkdtempSync(join(tmpdir(), prefix))
}

/** `prefix-router ARGS` from dist/, its stdout. */
export function cli(args: string[]): string {
  return execFileSync(process.execPath, ['--initial-old-space-size=128', 'dist/cli.js', ...args], { cwd: root, encoding: 'utf8', maxBuffer: 64 << 20, stdio: ['ignore', 'pipe', 'pipe'] })
}

/** Runs a replay; its result, its table, the command as a user would type it and how long it took. */
export function replay(dir: string, args: string[]): { result: ReplayResult; table: string; command: string; seconds: number } {
  const out = join(dir, `out-${Math.random().toString(36).slice(2)}`)
  const t0 = performance.now()
  const table = cli(['replay', ...args, '--quiet', '--out', out])
  const result = JSON.parse(readFileSync(join(out, 'replay.json'), 'utf8')) as ReplayResult
  return { result, table, command: `npx prefix-router replay ${args.join(' ')}`, seconds: (performance.now() - t0) / 1000 }
}

/** The names in `env` (comma-separated) that are among `all`; all of them when unset. */
export const wanted = (env: string | undefined, all: string[]): string[] => (env === undefined ? all : env.split(',').filter((s) => all.includes(s)))

export const machine = (): string => `machine: ${cpus().length} × ${cpus()[0]?.model ?? 'unknown CPU'}; node ${process.version}`

/** Targets checked one by one, printed as they are, and summed up at the end. */
export class Checks {
  readonly results: { what: string; ok: boolean; detail: string }[] = []
  constructor(private readonly labels: { ok: string; fail: string } = { ok: 'PASS', fail: 'FAIL' }) {}

  check(what: string, ok: boolean, detail: string): void {
    this.results.push({ what, ok, detail })
    console.log(`  ${ok ? this.labels.ok : this.labels.fail} ${what}: ${detail}`)
  }

  get failed(): { what: string; detail: string }[] {
    return this.results.filter((r) => !r.ok)
  }

  /** Prints the tally and the failures, removes `dir`, and sets the exit code. */
  finish(dir: string): void {
    rmSync(dir, { recursive: true, force: true })
    const failed = this.failed
    console.log(`\n${this.results.length - failed.length} ${this.labels.ok.trim()}, ${failed.length} ${this.labels.fail.trim()}`)
    for (const f of failed) console.log(`  ${this.labels.fail} ${f.what}: ${f.detail}`)
    process.exitCode = failed.length === 0 ? 0 : 1
  }
}
