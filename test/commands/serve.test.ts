// `prefix-router serve` and `route` as an operator runs them: a child process, real flags.
import { spawn, spawnSync, type ChildProcessWithoutNullStreams } from 'node:child_process'
import { mkdtempSync, rmSync, writeFileSync } from 'node:fs'
import { tmpdir } from 'node:os'
import { join } from 'node:path'
import { fileURLToPath } from 'node:url'
import { afterAll, afterEach, beforeAll, describe, expect, it } from 'vitest'
import { startSimFleet, type SimFleet } from '../../src/sim/index.js'
import { chat, post } from '../proxy/helpers.js'

const cli = fileURLToPath(new URL('../../dist/cli.js', import.meta.url))
const dir = mkdtempSync(join(tmpdir(), 'pr-serve-'))
let fleet: SimFleet
let child: ChildProcessWithoutNullStreams | undefined

beforeAll(async () => {
  fleet = await startSimFleet({ instances: 3, profile: 'tiny' })
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

/** Starts serve; resolves with its URLs once it says it is routing. */
function serve(args: string[], env: NodeJS.ProcessEnv = {}): Promise<{ url: string; admin: string; stderr: () => string; stdout: () => string }> {
  child = spawn(process.execPath, [cli, 'serve', '--port', '0', '--admin-port', '0', '--log-level', 'warn', '--drain-delay-ms', '0', ...args], { env: { ...process.env, ...env } })
  let err = ''
  let out = ''
  child.stdout.on('data', (d: Buffer) => (out += d.toString()))
  return new Promise((resolve, reject) => {
    const timer = setTimeout(() => reject(new Error(`serve did not start:\n${err}`)), 15_000)
    child!.stderr.on('data', (d: Buffer) => {
      err += d.toString()
      const m = /on (http:\/\/[\d.:]+) \(admin (http:\/\/[\d.:]+)\)/.exec(err)
      if (m) {
        clearTimeout(timer)
        resolve({ url: m[1]!, admin: m[2]!, stderr: () => err, stdout: () => out })
      }
    })
    child!.once('exit', (code) => reject(new Error(`serve exited with ${code}:\n${err}`)))
  })
}

describe('prefix-router serve', () => {
  it('routes to simulator workers given by --upstream, with the acceptance flags', async () => {
    const args = fleet.urls.flatMap((u) => ['--upstream', u])
    const s = await serve([...args, '--strategy', 'prefix_aware', '--prefix-length', '1024', '--concurrency-threshold', '4', '--debug-headers'])
    const seen = new Set<string>()
    for (let i = 0; i < 5; i++) {
      const r = await post(`${s.url}/v1/chat/completions`, chat('The same system prompt. '.repeat(60), { model: 'sim-tiny', max_tokens: 2 }))
      expect(r.status).toBe(200)
      seen.add(r.headers.get('x-prefix-router-instance')!)
    }
    expect(seen.size).toBe(1)
    expect(fleet.urls).toContain([...seen][0])
    const report = (await (await fetch(`${s.admin}/admin/instances`)).json()) as { endpoints: { routing: { concurrencyThreshold: number; prefixLength: number } }[] }
    expect(report.endpoints[0]!.routing).toMatchObject({ concurrencyThreshold: 4, prefixLength: 1024 })
    child!.kill('SIGTERM')
    const code = await new Promise((r) => child!.once('exit', r))
    expect(code).toBe(0)
  })

  it('--demo starts an embedded simulated fleet and prints a curl command that works (npm start)', async () => {
    const s = await serve(['--demo'])
    expect(s.stderr()).toMatch(/--demo: started an embedded fleet of 4 SIMULATED vLLM workers/)
    const m = /curl -s (\S+) -H 'content-type: application\/json' \\\n\s+-d '(.+)'/.exec(s.stderr())
    expect(m).not.toBeNull()
    const r = await post(m![1]!, m![2]!)
    expect(r.status).toBe(200)
    expect(JSON.parse(r.text)).toMatchObject({ object: 'chat.completion' })
  })

  it('SIGHUP re-reads the config file: a new strategy applies to new requests', async () => {
    const file = join(dir, 'router.yaml')
    const write = (strategy: string) => writeFileSync(file, `routing:\n  strategy: ${strategy}\nendpoints:\n  - name: default\n    instances:\n${fleet.urls.map((u) => `      - ${u}\n`).join('')}`)
    write('prefix_aware')
    const s = await serve(['--config', file])
    const strategy = async () => ((await (await fetch(`${s.admin}/admin/instances`)).json()) as { endpoints: { routing: { strategy: string } }[] }).endpoints[0]!.routing.strategy
    expect(await strategy()).toBe('prefix_aware')
    write('least_outstanding_requests')
    child!.kill('SIGHUP')
    const end = Date.now() + 5000
    while ((await strategy()) !== 'least_outstanding_requests' && Date.now() < end) await new Promise((r) => setTimeout(r, 50))
    expect(await strategy()).toBe('least_outstanding_requests')
    // POST /admin/reload does the same, and reports a bad file without dropping the running config.
    writeFileSync(file, 'routing:\n  prefixLength: 5\n')
    const bad = await fetch(`${s.admin}/admin/reload`, { method: 'POST' })
    expect(bad.status).toBe(400)
    expect(((await bad.json()) as { error: { message: string } }).error.message).toMatch(/routing\.prefixLength/)
    expect(await strategy()).toBe('least_outstanding_requests')
    // Both paths log the failure at warn, with the reason.
    child!.kill('SIGHUP')
    const failures = () => s.stdout().split('\n').filter((l) => l.includes('reload failed'))
    const until = Date.now() + 10_000
    while (failures().length < 2 && Date.now() < until) await new Promise((r) => setTimeout(r, 50))
    expect(failures()).toHaveLength(2)
    for (const l of failures()) expect(JSON.parse(l)).toMatchObject({ level: 40, err: expect.stringMatching(/routing\.prefixLength/) })
    expect(await strategy()).toBe('least_outstanding_requests')
  })

  it('a bad flag exits 2 naming it', () => {
    const r = spawnSync(process.execPath, [cli, 'serve', '--prefix-length', '12', '--upstream', 'http://127.0.0.1:1'], { encoding: 'utf8' })
    expect(r.status).toBe(2)
    expect(r.stderr).toMatch(/routing\.prefixLength: Too small: expected number to be >=1024; got 12 \(from --prefix-length\)/)
    const u = spawnSync(process.execPath, [cli, 'serve', '--bogus'], { encoding: 'utf8' })
    expect(u.status).toBe(2)
    expect(u.stderr).toMatch(/unknown option '--bogus'/)
  })
})

describe('prefix-router route (dry run)', () => {
  it('names the instance the router would use, and the live router agrees', async () => {
    const file = join(dir, 'route.yaml')
    writeFileSync(file, `routing: { strategy: prefix_aware }\nendpoints:\n  - name: default\n    instances:\n${fleet.urls.map((u) => `      - ${u}\n`).join('')}`)
    const s = await serve(['--config', file, '--debug-headers'])
    for (let i = 0; i < 6; i++) {
      const body = chat(`dry run ${i} `.repeat(30), { model: 'sim-tiny', max_tokens: 1 })
      const dry = spawnSync(process.execPath, [cli, 'route', '--config', file, '--api', 'openai', '--json'], { input: body, encoding: 'utf8' })
      expect(dry.status, dry.stderr).toBe(0)
      const out = JSON.parse(dry.stdout) as { instance: string; reason: string; strategy: string }
      expect(out).toMatchObject({ reason: 'target', strategy: 'prefix_aware' })
      const live = await post(`${s.url}/v1/chat/completions`, body)
      expect(live.headers.get('x-prefix-router-instance')).toBe(out.instance)
    }
  })

  it('invoke bytes and tenants; text output; errors name the problem', () => {
    const file = join(dir, 'route2.yaml')
    writeFileSync(file, `routing: { strategy: prefix_aware }\nendpoints:\n  - name: default\n    instances: [http://10.1.0.1:8000, http://10.1.0.2:8000, http://10.1.0.3:8000]\n`)
    const a = spawnSync(process.execPath, [cli, 'route', '--config', file, '--api', 'invoke', '--tenant', 'acme'], { input: 'x'.repeat(5000), encoding: 'utf8' })
    expect(a.status, a.stderr).toBe(0)
    expect(a.stdout).toMatch(/^http:\/\/10\.1\.0\.\d:8000\n  endpoint default, strategy prefix_aware, reason target, api invoke\n  key: first 4096 of 5000 body bytes, xxh3 [0-9a-f]{16}, tenant 'acme'/)
    const bad = spawnSync(process.execPath, [cli, 'route', '--config', file, '--api', 'openai'], { input: '{"model":"m"}', encoding: 'utf8' })
    expect(bad.status).toBe(2)
    expect(bad.stderr).toMatch(/missing_messages: 'messages' must be a non-empty array/)
    const badApi = spawnSync(process.execPath, [cli, 'route', '--config', file, '--api', 'grpc'], { input: '', encoding: 'utf8' })
    expect(badApi.status).toBe(2)
    expect(badApi.stderr).toMatch(/--api must be chat, completions, openai or invoke; got 'grpc'/)
  })

  it('longest_prefix: the dry run says what it cannot know, for either placement', () => {
    const body = JSON.stringify({ model: 'm', messages: [{ role: 'user', content: 'where is my order?' }] })
    const answers = (['hash', 'balanced'] as const).map((placement) => {
      const file = join(dir, `route-${placement}.yaml`)
      writeFileSync(file, `routing: { strategy: longest_prefix, placement: ${placement} }\nendpoints:\n  - name: default\n    instances: [http://10.1.0.1:8000, http://10.1.0.2:8000, http://10.1.0.3:8000]\n`)
      const r = spawnSync(process.execPath, [cli, 'route', '--config', file, '--api', 'openai', '--json'], { input: body, encoding: 'utf8' })
      expect(r.status, r.stderr).toBe(0)
      return JSON.parse(r.stdout) as { instance: string; reason: string; placement: string; note: string }
    })
    expect(answers[0]).toMatchObject({ reason: 'target', placement: 'hash', note: expect.stringMatching(/^where the hash places a prompt no instance holds/) })
    expect(answers[1]).toMatchObject({ reason: 'target', placement: 'balanced', note: expect.stringMatching(/^with every instance idle; balanced placement/) })
    expect(answers[1]!.instance).toBe(answers[0]!.instance) // idle instances: balanced keeps the hash's choice
  })
})
