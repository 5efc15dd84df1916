// The status page's files (src/runtime/admin/status/: index.html, status.js, status.css), as the admin
// port serves them at /, /status.js and /status.css. They are plain files, shipped as they
// are (package.json `files`) and read from the package's src/runtime/admin/status whether this module
// runs from src/runtime/admin or from dist/runtime/admin; read once, on first asked.
import { existsSync, readFileSync } from 'node:fs'
import { dirname, join } from 'node:path'
import { fileURLToPath } from 'node:url'

/** What a browser may do with the page: its own script, style and JSON, nothing else. */
export const STATUS_PAGE_HEADERS: Readonly<Record<string, string>> = {
  'content-security-policy': "default-src 'none'; script-src 'self'; style-src 'self'; connect-src 'self'; img-src 'self'; base-uri 'none'; form-action 'none'; frame-ancestors 'none'",
  'x-content-type-options': 'nosniff',
  'referrer-policy': 'no-referrer',
  'cache-control': 'no-cache',
}

const FILES: Readonly<Record<string, { file: string; type: string }>> = {
  '/': { file: 'index.html', type: 'text/html; charset=utf-8' },
  '/status.js': { file: 'status.js', type: 'text/javascript; charset=utf-8' },
  '/status.css': { file: 'status.css', type: 'text/css; charset=utf-8' },
}

function statusDir(): string {
  const here = dirname(fileURLToPath(import.meta.url))
  const candidates = [join(here, 'status'), join(here, '../../../src/runtime/admin/status')]
  return candidates.find((d) => existsSync(join(d, 'index.html'))) ?? candidates[0]!
}

const loaded = new Map<string, { body: Buffer; type: string }>()

/** The file served at `path`, or undefined when the path is not one of the page's. */
export function statusAsset(path: string): { body: Buffer; type: string } | undefined {
  const f = FILES[path]
  if (f === undefined) return undefined
  let a = loaded.get(path)
  if (a === undefined) loaded.set(path, (a = { body: readFileSync(join(statusDir(), f.file)), type: f.type }))
  return a
}
