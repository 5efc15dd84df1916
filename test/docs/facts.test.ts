// What the docs say about the picker's flags and the admin port, checked against the code
// they describe: a flag or a route added or refused without the docs saying so fails here.
import { spawnSync } from 'node:child_process'
import { readFileSync } from 'node:fs'
import { fileURLToPath } from 'node:url'
import { afterEach, describe, expect, it } from 'vitest'
import { EPP_FLAGS } from '../../src/commands/epp-flags.js'
import { FLAGS } from '../../src/commands/flags.js'
import type { ProxyServer } from '../../src/proxy/proxy.js'
import { closeRouter, startRouter } from '../proxy/helpers.js'

const read = (path: string) => readFileSync(fileURLToPath(new URL(path, import.meta.url)), 'utf8')
const picker = read('../../docs/endpoint-picker.md')
const deploying = read('../../docs/deploying.md')
const metrics = read('../../docs/metrics.md')
const cli = fileURLToPath(new URL('../../dist/cli.js', import.meta.url))

/** The text of a page from a marker to another (or to its end); the markers must be there. */
function section(page: string, from: string, to?: string): string {
  const start = page.indexOf(from)
  const end = to === undefined ? page.length : page.indexOf(to, start)
  expect(start, from).toBeGreaterThan(-1)
  expect(end, to).toBeGreaterThan(start)
  return page.slice(start, end)
}

describe("docs/endpoint-picker.md's flags", () => {
  it('name every serve flag epp refuses, and epp does refuse each', () => {
    const refused = FLAGS.filter((f) => !EPP_FLAGS.some((e) => e.name === f.name)).map((f) => f.name)
    expect(refused).toContain('workers')
    const text = section(picker, "Its flags are serve's", '| Flag | Variable |')
    // --tls-cert and --tls-key are written together as --tls-*.
    expect(refused.filter((name) => !text.includes(name.startsWith('tls-') ? '`--tls-*`' : `\`--${name}\``))).toEqual([])
    for (const name of refused) {
      const r = spawnSync(process.execPath, [cli, 'epp', `--${name}`, ...(FLAGS.find((f) => f.name === name)!.kind === 'boolean' ? [] : ['1'])], { encoding: 'utf8' })
      expect([r.status, r.stderr], name).toEqual([2, expect.stringContaining(`unknown option '--${name}'`)])
    }
  })
})

describe("the docs' admin port", () => {
  let router: ProxyServer | undefined
  afterEach(async () => {
    await closeRouter(router)
    router = undefined
  })

  // The routes as the admin server matches them (src/runtime/admin/admin.ts).
  const routes = [...read('../../src/runtime/admin/admin.ts').matchAll(/req\.method === '(\w+)' && path === '([^']+)'/g)].map((m) => ({ method: m[1]!, path: m[2]! }))

  it('lists every route the admin server answers, and says that none is authenticated', () => {
    expect(routes.length).toBeGreaterThan(4)
    // docs/deploying.md's last section.
    const text = section(deploying, '## The admin port')
    expect(routes.filter((r) => !text.includes(`\`${r.method} ${r.path}\``))).toEqual([])
    expect(text).toContain('with no')
    expect(text).toContain('authentication')
    // And the reference list of routes has each one.
    const list = section(metrics, '- `GET /admin/instances`')
    expect(routes.filter((r) => r.path !== '/metrics' && !list.includes(`\`${r.method} ${r.path}`))).toEqual([])
  })

  it('every one of them answers without a credential: none asks for one', async () => {
    router = await startRouter(['http://127.0.0.1:9'])
    for (const r of routes) {
      const res = await fetch(`${router.adminUrl}${r.path}`, { method: r.method, ...(r.method === 'POST' && { body: '{}' }) })
      await res.arrayBuffer()
      expect([401, 403], `${r.method} ${r.path}`).not.toContain(res.status)
      expect(res.headers.get('www-authenticate'), `${r.method} ${r.path}`).toBeNull()
    }
  })
})
