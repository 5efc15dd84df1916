// A disaggregated fleet as an operator starts and watches it: `serve --prefill ... --decode ...`
// in a child process against simulator workers, its banner, /admin/instances and /metrics;
// and a fleet whose roles leave a leg empty, warned of at start and as discovery changes it.
import { spawn, type ChildProcessWithoutNullStreams } from 'node:child_process'
import { mkdtempSync, renameSync, rmSync, writeFileSync } from 'node:fs'
import { tmpdir } from 'node:os'
import { join } from 'node:path'
import { fileURLToPath } from 'node:url'
import { afterAll, afterEach, beforeAll, describe, expect, it } from 'vitest'
import { startSimFleet, type SimFleet } from '../../src/sim/index.js'
import { chat, post, until } from '../proxy/helpers.js'

const cli = fileURLToPath(new URL('../../dist/cli.js', import.meta.url))
const dir = mkdtempSync(join(tmpdir(), 'pr-roles-'))
let fleet: SimFleet
let child: ChildProcessWithoutNullStreams | undefined

beforeAll(async () => {
  fleet = await startSimFleet({ instances: 4, profile: 'tiny' })
})
afterAll(async () => {
  await fleet.close()
  rmSync(dir, { recursive: true, force: true })
})
afterEach(async () => {
  if (child && child.exitCode === null) {
    child.kill('SIGTERM')
    await new Promise((r) => child!.once('exit', r))
  }
  child = undefined
})

const env = () => Object.fromEntries(Object.entries(process.env).filter(([k]) => !k.startsWith('PREFIX_ROUTER_')))

/** Starts serve; resolves once its banner is written whole (the `try:` lines end it). */
function serve(args: string[]): Promise<{ url: string; admin: string; stderr: () => string; stdout: () => string }> {
  const c = spawn(process.execPath, [cli, 'serve', '--host', '127.0.0.1', '--port', '0', '--admin-port', '0', '--drain-delay-ms', '0', '--warmup-requests', '0', '--debug-headers', ...args], { env: env() })
  child = c
  let err = ''
  let out = ''
  c.stdout.on('data', (d: Buffer) => (out += d.toString()))
  c.stderr.on('data', (d: Buffer) => (err += d.toString()))
  return until(() => /\ntry:\n|no model known/.test(err) || c.exitCode !== null, 60_000, 'the banner').then(() => {
    const m = /on (http:\/\/[\d.:]+) \(admin (http:\/\/[\d.:]+)\)/.exec(err)
    if (!m) throw new Error(`serve did not start:\n${err}`)
    return { url: m[1]!, admin: m[2]!, stderr: () => err, stdout: () => out }
  })
}

type Report = { endpoints: { roles: Record<string, number>; missingRole: string | null; disaggregation: Record<string, unknown>; instances: { id: string; role: string; bootstrapPort: number | null }[] }[] }
const report = async (admin: string) => ((await (await fetch(`${admin}/admin/instances`)).json()) as Report).endpoints[0]!
const gauges = async (admin: string, name: string) =>
  (await (await fetch(`${admin}/metrics`)).text())
    .split('\n')
    .filter((l) => l.startsWith(`${name}{`))
    .sort()

describe('serve with prefill and decode instances', () => {
  it('starts with --prefill URL [PORT] and --decode URL, says how many play each role, and shows the roles at /admin/instances and /metrics', async () => {
    const [p0, p1, d0, d1] = fleet.urls as [string, string, string, string]
    const s = await serve(['--prefill', p0, '8998', '--prefill', p1, '--decode', d0, '--decode', d1, '--pd-threshold', '128'])
    const err = s.stderr()
    expect(err).toMatch(/prefix-router: routing 4 instance\(s\) with longest_prefix on /)
    expect(err).toContain('\nprefix-router: 4 of 4 instances healthy\nprefix-router: 2 prefill + 2 decode, disaggregated with nixl, decode-first, threshold 128 tokens\n')
    expect(err).not.toContain('warning')

    const r = await report(s.admin)
    expect(r.roles).toEqual({ prefill: 2, decode: 2, both: 0 })
    expect(r.missingRole).toBeNull()
    expect(r.disaggregation).toEqual({ connector: 'nixl', order: 'decode-first', threshold: 128, decodePrefillCap: 2048, whenNoPrefill: 'decode', kvHoldMs: 20000, prefillTimeoutMs: 60000 })
    expect(r.instances.map((i) => `${i.id} ${i.role} ${i.bootstrapPort}`).sort()).toEqual([`${p0} prefill 8998`, `${p1} prefill null`, `${d0} decode null`, `${d1} decode null`].sort())

    expect(await gauges(s.admin, 'prefix_router_instances')).toEqual(
      [
        'prefix_router_instances{endpoint="default",role="prefill",state="healthy"} 2',
        'prefix_router_instances{endpoint="default",role="prefill",state="unhealthy"} 0',
        'prefix_router_instances{endpoint="default",role="decode",state="healthy"} 2',
        'prefix_router_instances{endpoint="default",role="decode",state="unhealthy"} 0',
        'prefix_router_instances{endpoint="default",role="both",state="healthy"} 0',
        'prefix_router_instances{endpoint="default",role="both",state="unhealthy"} 0',
      ].sort(),
    )
    expect(await gauges(s.admin, 'prefix_router_role_missing')).toEqual([
      'prefix_router_role_missing{endpoint="default",role="decode"} 0',
      'prefix_router_role_missing{endpoint="default",role="prefill"} 0',
    ])
    // Requests are still served (this branch routes them as a fleet of whole instances).
    const res = await post(`${s.url}/v1/chat/completions`, chat('hello', { model: 'sim-tiny', max_tokens: 2 }))
    expect(res.status).toBe(200)
    expect(fleet.urls).toContain(res.headers.get('x-prefix-router-instance'))
  }, 90_000)

  it('an endpoint whose instances leave a leg empty is warned of at start, with a metric, and again as discovery changes it', async () => {
    const [p0, , d0, d1] = fleet.urls as [string, string, string, string]
    const list = join(dir, 'decode.yaml')
    writeFileSync(list, `- ${d0}\n- ${d1}\n`)
    const config = join(dir, 'roles.yaml')
    writeFileSync(config, `disaggregation: { whenNoPrefill: fail }\nendpoints:\n  - name: chat\n    discovery: [{ type: file, path: ${JSON.stringify(list)}, role: decode }]\n`)
    const s = await serve(['--config', config])
    expect(s.stderr()).toContain(
      '\nprefix-router: 2 decode, disaggregated with nixl, decode-first, threshold 256 tokens\nprefix-router: warning: endpoint chat has 2 decode instance(s) but no prefill instance: requests fail with 503 (whenNoPrefill: fail)\n',
    )
    expect((await report(s.admin)).missingRole).toBe('prefill')
    expect(await gauges(s.admin, 'prefix_router_role_missing')).toEqual(['prefix_router_role_missing{endpoint="chat",role="decode"} 0', 'prefix_router_role_missing{endpoint="chat",role="prefill"} 1'])
    const logged = (msg: string) =>
      s
        .stdout()
        .split('\n')
        .filter((l) => l.includes(msg))
        .map((l) => JSON.parse(l) as Record<string, unknown>)
    await until(() => logged('but no prefill instance').length === 1, 30_000, 'the warning logged at start')
    expect(logged('but no prefill instance')[0]).toMatchObject({ level: 40, endpoint: 'chat', missing: 'prefill', roles: { prefill: 0, decode: 2, both: 0 } })

    // A prefill instance is discovered: whole again, the gauge back to 0.
    writeFileSync(`${list}.tmp`, `- ${d0}\n- ${d1}\n- { url: ${p0}, role: prefill }\n`)
    renameSync(`${list}.tmp`, list)
    await until(async () => (await report(s.admin)).missingRole === null, 30_000, 'the prefill instance in')
    await until(() => logged('has instances for prefill and decode again').length === 1, 30_000, 'whole again logged')
    expect(await gauges(s.admin, 'prefix_router_role_missing')).toEqual(['prefix_router_role_missing{endpoint="chat",role="decode"} 0', 'prefix_router_role_missing{endpoint="chat",role="prefill"} 0'])

    // The decode instances go: prefill alone, requests cannot be served.
    writeFileSync(`${list}.tmp`, `- { url: ${p0}, role: prefill }\n`)
    renameSync(`${list}.tmp`, list)
    await until(() => logged('but no decode instance').length === 1, 30_000, 'the missing decode instance logged')
    expect(logged('but no decode instance')[0]!.msg).toBe('endpoint chat has 1 prefill instance(s) but no decode instance: requests cannot be served: no decode instance')
    expect(await gauges(s.admin, 'prefix_router_role_missing')).toEqual(['prefix_router_role_missing{endpoint="chat",role="decode"} 1', 'prefix_router_role_missing{endpoint="chat",role="prefill"} 0'])
  }, 90_000)

  it('an endpoint without roles prints the banner it always did', async () => {
    const s = await serve(fleet.urls.slice(0, 2).flatMap((u) => ['--upstream', u]))
    const lines = s.stderr().split('\n')
    const at = lines.findIndex((l) => l.startsWith('prefix-router: routing'))
    expect(lines.slice(at + 1, at + 3)).toEqual(['prefix-router: 2 of 2 instances healthy', 'try:'])
    expect((await report(s.admin)).instances.map((i) => i.role)).toEqual(['both', 'both'])
  }, 90_000)
})
