// `prefix-router epp` as an operator runs it (dist/cli.js: `npx tsc -p tsconfig.build.json`
// first): bad values are one line naming the flag or variable, exit 2; it starts in front of
// simulator pods, answers the test gateway and gRPC health, and drains on SIGTERM.
import { spawn, type ChildProcess } from 'node:child_process'
import { mkdtempSync, writeFileSync } from 'node:fs'
import { createServer, type AddressInfo } from 'node:net'
import { tmpdir } from 'node:os'
import { join } from 'node:path'
import { fileURLToPath } from 'node:url'
import { afterEach, describe, expect, it } from 'vitest'
import { startSimFleet, type SimFleet } from '../../src/sim/index.js'
import { until } from '../proxy/helpers.js'
import { TestGateway } from './gateway.js'
import { chatBody } from './helpers.js'

const cli = fileURLToPath(new URL('../../dist/cli.js', import.meta.url))

function start(args: string[], env: Record<string, string> = {}): { child: ChildProcess; out: { stdout: string; stderr: string }; code: Promise<number | null> } {
  const clean = Object.fromEntries(Object.entries(process.env).filter(([k]) => !k.startsWith('PREFIX_ROUTER_')))
  const child = spawn(process.execPath, [cli, 'epp', ...args], { env: { ...clean, ...env } })
  const out = { stdout: '', stderr: '' }
  child.stdout!.on('data', (d: Buffer) => (out.stdout += d.toString()))
  child.stderr!.on('data', (d: Buffer) => (out.stderr += d.toString()))
  const code = new Promise<number | null>((r) => child.once('close', (c) => r(c)))
  return { child, out, code }
}

let fleet: SimFleet | undefined
let running: ChildProcess | undefined
afterEach(async () => {
  running?.kill('SIGKILL')
  running = undefined
  await fleet?.close()
  fleet = undefined
})

describe('prefix-router epp', () => {
  it.each([
    [['--upstream', 'http://127.0.0.1:1', '--grpc-port', '70000'], {}, "--grpc-port must be a port, 0-65535; got '70000'"],
    [['--upstream', 'http://127.0.0.1:1', '--body-mode', 'chunked'], {}, "--body-mode must be streamed or buffered; got 'chunked'"],
    [['--upstream', 'http://127.0.0.1:1'], { PREFIX_ROUTER_GRPC_PORT: 'x' }, "PREFIX_ROUTER_GRPC_PORT must be a port, 0-65535; got 'x'"],
    [['--upstream', 'http://127.0.0.1:1', '--grpc-host', ''], {}, "--grpc-host must be an address; got ''"],
    [['--upstream', 'http://127.0.0.1:1', '--grpc-port', '9100', '--admin-port', '9100'], {}, 'the gRPC port and the admin port are both 9100'],
    [['--upstream', 'http://127.0.0.1:1', '--port', '8080'], {}, "unknown option '--port'"],
  ])('refuses %j in one line naming it, exit 2', async (args, env, message) => {
    const p = start(args, env)
    expect(await p.code).toBe(2)
    const lines = p.out.stderr.trim().split('\n')
    expect(lines).toHaveLength(1)
    expect(lines[0]).toContain(message)
  })

  it('a gRPC port in use: one line saying so, exit 1', async () => {
    const busy = createServer()
    await new Promise<void>((r) => busy.listen(0, '127.0.0.1', () => r()))
    const port = (busy.address() as AddressInfo).port
    try {
      const p = start(['--upstream', 'http://127.0.0.1:1', '--grpc-host', '127.0.0.1', '--grpc-port', String(port), '--admin-port', '0'], { PREFIX_ROUTER_LOG_LEVEL: 'silent' })
      expect(await p.code).toBe(1)
      expect(p.out.stderr).toBe(`prefix-router: cannot listen on 127.0.0.1:${port} (gRPC): address already in use (EADDRINUSE); pick another with --grpc-port or --grpc-host\n`)
    } finally {
      busy.close()
    }
  })

  it("a bad configuration value is refused as serve refuses it: the key's line names the flag, exit 2", async () => {
    const p = start(['--upstream', 'http://127.0.0.1:1', '--strategy', 'nope'])
    expect(await p.code).toBe(2)
    expect(p.out.stderr).toMatch(/routing\.strategy: must be one of .* \(from --strategy\)\n$/)
    expect(p.out.stderr).not.toContain('    at ')
  })

  it('--help lists its flags with their variables, and no front-port flag', async () => {
    const p = start(['--help'])
    expect(await p.code).toBe(0)
    for (const f of ['--grpc-port N', '[PREFIX_ROUTER_GRPC_PORT]', '--grpc-host', '--body-mode', '--upstream', '--config', '--admin-port', '--strategy']) expect(p.out.stdout).toContain(f)
    expect(p.out.stdout).not.toMatch(/\n {2}--port /)
    expect(p.out.stdout).not.toContain('--tls-cert')
  })

  it('starts in front of simulator pods, picks for the gateway, answers health, drains on SIGTERM', async () => {
    fleet = await startSimFleet({ instances: 2, profile: 'tiny' })
    const p = start(['--grpc-host', '127.0.0.1', '--grpc-port', '0', '--admin-port', '0', '--drain-delay-ms', '200', '--drain-timeout-ms', '2000', ...fleet.urls.flatMap((u) => ['--upstream', u])], { PREFIX_ROUTER_LOG_LEVEL: 'silent' })
    running = p.child
    await until(() => /grpc:\/\/[\d.]+:\d+/.test(p.out.stderr) || p.child.exitCode !== null, 15000, 'the picker to start')
    const address = /grpc:\/\/([\d.]+:\d+)/.exec(p.out.stderr)![1]!
    expect(p.out.stderr).toContain('2 of 2 instances healthy')
    const gw = new TestGateway(address)
    try {
      expect(await gw.health('readiness')).toBe('SERVING')
      const res = await gw.chat({ body: chatBody('through the command') })
      expect(fleet.urls.map((u) => new URL(u).host)).toContain(res.header)
      expect(res.metadata).toBe(res.header)
      expect(res.status).toBe(200)
      p.child.kill('SIGTERM')
      await until(() => p.out.stderr.includes('draining'), 5000, 'the drain to start')
      expect(await gw.health('readiness')).toBe('NOT_SERVING')
      expect(await p.code).toBe(0)
      expect(p.out.stderr).toContain('prefix-router: stopped')
    } finally {
      gw.close()
    }
  })

  it('--config: the same configuration file as serve (endpoints, routing), --body-mode buffered', async () => {
    fleet = await startSimFleet({ instances: 2, profile: 'tiny' })
    const dir = mkdtempSync(join(tmpdir(), 'epp-'))
    const file = join(dir, 'router.yaml')
    writeFileSync(file, `endpoints:\n  - name: default\n    instances: [${fleet.urls.join(', ')}]\n    routing: { strategy: longest_prefix }\nadmin: { host: 127.0.0.1, port: 0 }\nlog: { level: silent }\n`)
    const p = start(['--config', file, '--grpc-host', '127.0.0.1', '--grpc-port', '0', '--body-mode', 'buffered'])
    running = p.child
    await until(() => /grpc:\/\/[\d.]+:\d+/.test(p.out.stderr) || p.child.exitCode !== null, 15000, 'the picker to start')
    expect(p.out.stderr).toContain('with longest_prefix, buffered bodies')
    const gw = new TestGateway(/grpc:\/\/([\d.]+:\d+)/.exec(p.out.stderr)![1]!, 'buffered')
    try {
      const res = await gw.chat({ body: chatBody('from the file') })
      expect(res.metadata).toBe(res.header)
      expect(res.status).toBe(200)
    } finally {
      gw.close()
    }
  })
})
