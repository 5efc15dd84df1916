// The proxy's answers for failures are made in one module (src/request/errors.ts), so that a
// status, type or code is chosen once and a client sees the same error from every path.
import { readFileSync } from 'node:fs'
import { dirname, join, relative, resolve } from 'node:path'
import { fileURLToPath } from 'node:url'
import { describe, expect, it } from 'vitest'
import { tsFiles } from '../helpers/import-graph.js'

const src = join(resolve(dirname(fileURLToPath(import.meta.url)), '../..'), 'src')
// parse-pool.ts revives a refusal the parser worker made with errors.ts's factories and sent back as data.
const REVIVES = 'request/parse-pool.ts'

describe('the proxy error factories', () => {
  it('are in src/request/errors.ts alone', () => {
    const making = tsFiles(src)
      .map((f) => [relative(src, f), (readFileSync(f, 'utf8').match(/\bnew ProxyError\(/g) ?? []).length] as const)
      .filter(([f, n]) => n > 0 && f !== join('request', 'errors.ts'))
    expect(making).toEqual([[join(...REVIVES.split('/')), 1]])
  })
})
