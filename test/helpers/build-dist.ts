// Vitest's global setup: the tests that run the program as a user does (node dist/cli.js) test
// dist/, so dist/ is built from src/ before they run whenever it is missing or older than src/.
// `npm test` builds it first and this finds nothing to do; a run of a few files after an edit
// gets the edit, rather than a skip or a test of yesterday's code. A build that fails fails
// the run, with tsc's errors.
import { spawnSync } from 'node:child_process'
import { existsSync, statSync } from 'node:fs'
import { createRequire } from 'node:module'
import { dirname, join, relative, resolve } from 'node:path'
import { fileURLToPath } from 'node:url'
import { tsFiles } from './import-graph.js'

const root = resolve(dirname(fileURLToPath(import.meta.url)), '../..')

/** The files of `src` whose output in `dist` is missing or older than they are. */
export function staleOutputs(src: string, dist: string): string[] {
  return tsFiles(src).filter((f) => {
    if (f.endsWith('.d.ts')) return false
    const out = join(dist, relative(src, f)).replace(/\.ts$/, '.js')
    return !existsSync(out) || statSync(out).mtimeMs < statSync(f).mtimeMs
  })
}

export default function buildDist(): void {
  const stale = staleOutputs(join(root, 'src'), join(root, 'dist'))
  if (stale.length === 0) return
  const tsc = createRequire(import.meta.url).resolve('typescript/bin/tsc')
  const r = spawnSync(process.execPath, [tsc, '-p', join(root, 'tsconfig.build.json')], { cwd: root, encoding: 'utf8' })
  if (r.status !== 0) {
    const shown = stale.slice(0, 3).map((f) => relative(root, f)).join(', ')
    throw new Error(`dist/ is older than src/ (${shown}${stale.length > 3 ? ', …' : ''}) and building it failed (tsc -p tsconfig.build.json):\n${r.stdout}${r.stderr}`)
  }
}
