// `prefix-router epp` as an operator runs it (dist/cli.js: `npx tsc -p tsconfig.build.json`
// first): bad values are one line naming the flag or variable, exit 2; it starts in front of
// simulator pods, answers the test gateway over TLS (self-signed, or the pair given and read
// again on SIGHUP) or plaintext, gRPC health in plaintext on its own port, and drains on SIGTERM.
import { spawn, type ChildProcess } from 'node:child_process'
import { X509Certificate } from 'node:crypto'
import { mkdtempSync, writeFileSync } from 'node:fs'
import { createServer, type AddressInfo } from 'node:net'
import { tmpdir } from 'node:os'
import { join } from 'node:path'
import { fileURLToPath } from 'node:url'
import { afterEach, describe, expect, it } from 'vitest'
import { selfSignedPair } from '../../src/epp/tls.js'
import { startSimFleet, type SimFleet } from '../../src/sim/index.js'
import { until } from '../proxy/helpers.js'
import { servedFingerprint, TestGateway, tlsSkipVerify } from './gateway.js'
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
    [['--upstream', 'http://127.0.0.1:1', '--grpc-tls', 'maybe'], {}, "--grpc-tls must be on or off; got 'maybe'"],
    [['--upstream', 'http://127.0.0.1:1'], { PREFIX_ROUTER_GRPC_TLS: 'yes' }, "PREFIX_ROUTER_GRPC_TLS must be on or off; got 'yes'"],
    [['--upstream', 'http://127.0.0.1:1', '--grpc-tls-cert', '/tmp/c.pem'], {}, '--grpc-tls-cert and --grpc-tls-key go together; got only --grpc-tls-cert'],
    [['--upstream', 'http://127.0.0.1:1'], { PREFIX_ROUTER_GRPC_TLS_KEY: '/tmp/k.pem' }, '--grpc-tls-cert and PREFIX_ROUTER_GRPC_TLS_KEY go together; got only PREFIX_ROUTER_GRPC_TLS_KEY'],
    [['--upstream', 'http://127.0.0.1:1', '--grpc-tls', 'off', '--grpc-tls-cert', '/tmp/c.pem', '--grpc-tls-key', '/tmp/k.pem'], {}, '--grpc-tls-cert and --grpc-tls-key go with TLS; got --grpc-tls off'],
    [['--upstream', 'http://127.0.0.1:1', '--grpc-tls-cert', '/nonexistent/c.pem', '--grpc-tls-key', '/nonexistent/k.pem'], {}, '--grpc-tls-cert/--grpc-tls-key: cannot read the certificate /nonexistent/c.pem'],
    [['--upstream', 'http://127.0.0.1:1', '--grpc-health-port', '70000'], {}, "--grpc-health-port must be a port, 0-65535; got '70000'"],
    [['--upstream', 'http://127.0.0.1:1', '--grpc-port', '9100', '--grpc-health-port', '9100'], {}, 'the gRPC port and the health port are both 9100'],
    [['--upstream', 'http://127.0.0.1:1', '--grpc-health-port', '9100', '--admin-port', '9100'], {}, 'the health port and the admin port are both 9100'],
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

  it("a key that is not the certificate's: one line naming both flags and files, exit 2", async () => {
    const dir = mkdtempSync(join(tmpdir(), 'epp-tls-'))
    const [a, b] = [await selfSignedPair('a'), await selfSignedPair('b')]
    writeFileSync(join(dir, 'cert.pem'), a.cert)
    writeFileSync(join(dir, 'key.pem'), b.key)
    const p = start(['--upstream', 'http://127.0.0.1:1', '--grpc-tls-cert', join(dir, 'cert.pem'), '--grpc-tls-key', join(dir, 'key.pem')])
    expect(await p.code).toBe(2)
    const lines = p.out.stderr.trim().split('\n')
    expect(lines).toHaveLength(1)
    expect(lines[0]).toContain(`--grpc-tls-cert/--grpc-tls-key: ${join(dir, 'key.pem')} does not go with ${join(dir, 'cert.pem')}`)
  })

  it('a health port in use: one line saying so, exit 1', async () => {
    const busy = createServer()
    await new Promise<void>((r) => busy.listen(0, '127.0.0.1', () => r()))
    const port = (busy.address() as AddressInfo).port
    try {
      const p = start(['--upstream', 'http://127.0.0.1:1', '--grpc-host', '127.0.0.1', '--grpc-port', '0', '--grpc-health-port', String(port), '--admin-port', '0'], { PREFIX_ROUTER_LOG_LEVEL: 'silent' })
      expect(await p.code).toBe(1)
      expect(p.out.stderr).toBe(`prefix-router: cannot listen on 127.0.0.1:${port} (gRPC health, plaintext): address already in use (EADDRINUSE); pick another with --grpc-health-port or --grpc-host\n`)
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
    for (const f of ['--grpc-port N', '[PREFIX_ROUTER_GRPC_PORT]', '--grpc-host', '--body-mode', '--grpc-tls on|off', '[PREFIX_ROUTER_GRPC_TLS]', '--grpc-tls-cert FILE', '[PREFIX_ROUTER_GRPC_TLS_KEY]', '--grpc-health-port N', '[PREFIX_ROUTER_GRPC_HEALTH_PORT]', '--upstream', '--config', '--admin-port', '--strategy']) expect(p.out.stdout).toContain(f)
    expect(p.out.stdout).not.toMatch(/\n {2}--port /)
    expect(p.out.stdout).not.toContain('--tls-cert')
  })

  it('starts in front of simulator pods over TLS (self-signed), picks for the gateway, answers health there and in plaintext on the health port, drains on SIGTERM', async () => {
    fleet = await startSimFleet({ instances: 2, profile: 'tiny' })
    const p = start(['--grpc-host', '127.0.0.1', '--grpc-port', '0', '--grpc-health-port', '0', '--admin-port', '0', '--drain-delay-ms', '200', '--drain-timeout-ms', '2000', ...fleet.urls.flatMap((u) => ['--upstream', u])], { PREFIX_ROUTER_LOG_LEVEL: 'silent' })
    running = p.child
    await until(() => /grpc:\/\/[\d.]+:\d+/.test(p.out.stderr) || p.child.exitCode !== null, 15000, 'the picker to start')
    const address = /grpc:\/\/([\d.]+:\d+)/.exec(p.out.stderr)![1]!
    expect(p.out.stderr).toContain('2 of 2 instances healthy')
    const fp = /TLS, self-signed certificate sha256 ([0-9A-F:]+); health in plaintext on grpc:\/\/([\d.]+:\d+)/.exec(p.out.stderr)
    expect(fp, p.out.stderr).not.toBeNull()
    expect(await servedFingerprint(address)).toBe(fp![1])
    const gw = new TestGateway(address, 'streamed', tlsSkipVerify())
    const probe = new TestGateway(fp![2]!)
    try {
      expect(await gw.health('readiness')).toBe('SERVING')
      expect(await probe.health('readiness')).toBe('SERVING')
      expect(await probe.health('liveness')).toBe('SERVING')
      const res = await gw.chat({ body: chatBody('through the command') })
      expect(fleet.urls.map((u) => new URL(u).host)).toContain(res.header)
      expect(res.metadata).toBe(res.header)
      expect(res.status).toBe(200)
      p.child.kill('SIGTERM')
      await until(() => p.out.stderr.includes('draining'), 5000, 'the drain to start')
      expect(await gw.health('readiness')).toBe('NOT_SERVING')
      expect(await probe.health('readiness')).toBe('NOT_SERVING')
      expect(await p.code).toBe(0)
      expect(p.out.stderr).toContain('prefix-router: stopped')
    } finally {
      gw.close()
      probe.close()
    }
  })

  it('--config: the same configuration file as serve (endpoints, routing), --body-mode buffered, --grpc-tls off: plaintext and no health port', async () => {
    fleet = await startSimFleet({ instances: 2, profile: 'tiny' })
    const dir = mkdtempSync(join(tmpdir(), 'epp-'))
    const file = join(dir, 'router.yaml')
    writeFileSync(file, `endpoints:\n  - name: default\n    instances: [${fleet.urls.join(', ')}]\n    routing: { strategy: longest_prefix }\nadmin: { host: 127.0.0.1, port: 0 }\nlog: { level: silent }\n`)
    const p = start(['--config', file, '--grpc-host', '127.0.0.1', '--grpc-port', '0', '--body-mode', 'buffered', '--grpc-tls', 'off'])
    running = p.child
    await until(() => /grpc:\/\/[\d.]+:\d+/.test(p.out.stderr) || p.child.exitCode !== null, 15000, 'the picker to start')
    expect(p.out.stderr).toContain('with longest_prefix, buffered bodies')
    expect(p.out.stderr).toMatch(/grpc:\/\/[\d.]+:\d+ \(plaintext; admin /)
    const gw = new TestGateway(/grpc:\/\/([\d.]+:\d+)/.exec(p.out.stderr)![1]!, 'buffered')
    try {
      const res = await gw.chat({ body: chatBody('from the file') })
      expect(res.metadata).toBe(res.header)
      expect(res.status).toBe(200)
    } finally {
      gw.close()
    }
  })

  it('its banner says the exact view as it is: publishers reached, views trusted, the tokenizer in force', async () => {
    fleet = await startSimFleet({ instances: 1, profile: 'tiny' })
    const nobody = createServer()
    await new Promise<void>((r) => nobody.listen(0, '127.0.0.1', () => r()))
    const port = (nobody.address() as AddressInfo).port
    await new Promise((r) => nobody.close(r))
    const p = start(['--grpc-host', '127.0.0.1', '--grpc-port', '0', '--grpc-tls', 'off', '--admin-port', '0', '--upstream', fleet.urls[0]!, '--kv-events-port', String(port)], { PREFIX_ROUTER_LOG_LEVEL: 'silent' })
    running = p.child
    await until(() => /exact view/.test(p.out.stderr) || p.child.exitCode !== null, 15000, 'the banner')
    expect(p.out.stderr).toContain('prefix-router: exact view (KV events): 0 of 1 publishers reached, 0 of 1 views trusted; tokenizer remote (the default')
    expect(p.out.stderr).toContain(`publisher tcp://127.0.0.1:${port} not reached yet`)
  })

  it('serves the pair given through the variables, and the one written over it after SIGHUP; a pair that does not load is logged and the old one stays', async () => {
    fleet = await startSimFleet({ instances: 1, profile: 'tiny' })
    const dir = mkdtempSync(join(tmpdir(), 'epp-tls-'))
    const cert = join(dir, 'tls.crt')
    const key = join(dir, 'tls.key')
    const [first, second] = [await selfSignedPair('first'), await selfSignedPair('second')]
    writeFileSync(cert, first.cert)
    writeFileSync(key, first.key)
    const p = start(['--grpc-host', '127.0.0.1', '--grpc-port', '0', '--grpc-health-port', '0', '--admin-port', '0', '--upstream', fleet.urls[0]!], { PREFIX_ROUTER_GRPC_TLS_CERT: cert, PREFIX_ROUTER_GRPC_TLS_KEY: key, PREFIX_ROUTER_LOG_LEVEL: 'info' })
    running = p.child
    await until(() => /grpc:\/\/[\d.]+:\d+/.test(p.out.stderr) || p.child.exitCode !== null, 15000, 'the picker to start')
    const address = /grpc:\/\/([\d.]+:\d+)/.exec(p.out.stderr)![1]!
    const fp = (pem: string) => new X509Certificate(pem).fingerprint256
    expect(p.out.stderr).toContain(`TLS, certificate ${cert} sha256 ${fp(first.cert)}`)
    expect(await servedFingerprint(address)).toBe(fp(first.cert))
    const gw = new TestGateway(address, 'streamed', tlsSkipVerify())
    try {
      expect((await gw.chat({ body: chatBody('given pair') })).status).toBe(200)
      writeFileSync(cert, second.cert)
      writeFileSync(key, second.key)
      p.child.kill('SIGHUP')
      await until(async () => (await servedFingerprint(address)) === fp(second.cert), 10000, 'the new pair to be served')
      writeFileSync(key, first.key)
      p.child.kill('SIGHUP')
      await until(() => p.out.stdout.includes('the certificate files do not load'), 10000, 'the bad pair to be logged')
      expect(await servedFingerprint(address)).toBe(fp(second.cert))
      expect((await gw.chat({ body: chatBody('after the reload') })).status).toBe(200)
    } finally {
      gw.close()
    }
  })
})
