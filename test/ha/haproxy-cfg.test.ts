// deploy/haproxy/haproxy.cfg as a user copies it: valid with nothing set (every variable has
// its default), its health check the route serve answers 503 on while draining, and its default
// check timings taking a draining replica out before serve's default drain delay is over.
// (test/ha/replicas.test.ts runs HAProxy on the same file.)
import { spawnSync } from 'node:child_process'
import { readFileSync } from 'node:fs'
import { describe, expect, it } from 'vitest'
import { parseConfig } from '../../src/config/config.js'
import { matchRoute } from '../../src/request/routes.js'
import { HAPROXY_CFG, haproxyBinary } from './helpers.js'

const text = readFileSync(HAPROXY_CFG, 'utf8')

/** The file's defaults: presetenv NAME VALUE. */
const defaults = new Map([...text.matchAll(/^\s*presetenv (\S+) (\S+)$/gm)].map((m) => [m[1]!, m[2]!]))

/** An HAProxy time (500ms, 2s, 1m) in milliseconds. */
function ms(v: string): number {
  const m = /^(\d+)(ms|s|m)?$/.exec(v)
  if (m === null) throw new Error(`not an HAProxy time: ${v}`)
  return Number(m[1]) * { ms: 1, s: 1000, m: 60_000 }[m[2] ?? 'ms']!
}

describe('deploy/haproxy/haproxy.cfg', () => {
  it('is valid as it is, with an empty environment, and with the fourth slot set', () => {
    const bare = spawnSync(haproxyBinary(), ['-c', '-f', HAPROXY_CFG], { encoding: 'utf8', env: {} })
    expect(`${bare.stdout}${bare.stderr}`).toMatch(/Configuration file is valid/)
    expect(bare.status).toBe(0)
    const four = spawnSync(haproxyBinary(), ['-c', '-f', HAPROXY_CFG], { encoding: 'utf8', env: { PR_REPLICA_4: '127.0.0.1:8084' } })
    expect(four.status, four.stderr).toBe(0)
  })

  it('checks /health, which serve answers itself (503 while draining)', () => {
    const path = /option httpchk GET (\S+)/.exec(text)?.[1]
    expect(path).toBe('/health')
    expect(matchRoute(path!)?.route.kind).toBe('health')
    expect(text).toMatch(/http-check expect status 200/)
  })

  it("takes a draining replica out before serve's default drain delay ends", () => {
    const inter = ms(defaults.get('PR_CHECK_INTER')!)
    const fast = ms(defaults.get('PR_CHECK_FASTINTER')!)
    const fall = Number(defaults.get('PR_CHECK_FALL'))
    const drainDelay = parseConfig({}).drain.delayMs
    // The first failed check comes at most one interval after /health turns 503, the others a
    // fast interval apart.
    expect(inter + (fall - 1) * fast).toBeLessThan(drainDelay)
    // The defaults are the ones the servers use.
    expect(text).toMatch(/default-server inter "\$\{PR_CHECK_INTER\}" fastinter "\$\{PR_CHECK_FASTINTER\}" .*fall "\$\{PR_CHECK_FALL\}"/)
  })
})
