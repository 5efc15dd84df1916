// Discovery from DNS against a real resolver: dnsmasq, started here, answering from a hosts
// file that each test rewrites (SIGHUP makes it read the file again). The instances are
// simulator workers on 127.0.0.x, which all reach this host on Linux.
import { spawn, type ChildProcess } from 'node:child_process'
import dgram from 'node:dgram'
import net from 'node:net'
import { Resolver } from 'node:dns/promises'
import { chmodSync, mkdtempSync, rmSync, writeFileSync } from 'node:fs'
import { tmpdir } from 'node:os'
import { join } from 'node:path'
import { fileURLToPath } from 'node:url'
import { afterAll, afterEach, beforeAll, describe, expect, it } from 'vitest'
import type { ProxyServer } from '../../../src/proxy/proxy.js'
import { startSimFleet, type SimFleet } from '../../../src/sim/index.js'
import { chat, closeRouter, post, until } from '../../proxy/helpers.js'
import { MODEL, members, membershipChange, reached, roles, sourceFailed, startDiscoveryRouter, untilLog, untilMembers, untilRoles } from './helpers.js'

const cli = fileURLToPath(new URL('../../../dist/cli.js', import.meta.url))
const dir = mkdtempSync(join(tmpdir(), 'pr-discovery-dns-'))
chmodSync(dir, 0o755) // dnsmasq started as root reads the file as nobody
const hosts = join(dir, 'hosts')
let dnsmasq: ChildProcess
let dnsPort: number
/** Workers on 127.0.0.1, .2 and .3, all on one port (an A record carries no port). */
let port: number
const fleets: SimFleet[] = []
/** Two workers found through SRV records, on ports of their own. */
let srv: { a: SimFleet; b: SimFleet }
let router: ProxyServer | undefined

const url = (n: number) => `http://127.0.0.${n}:${port}`

/** The hosts file dnsmasq answers from: vllm.test at the given 127.0.0.x, and the SRV targets. */
async function records(...addresses: number[]): Promise<void> {
  writeHosts(addresses)
  dnsmasq.kill('SIGHUP')
  await answering(addresses)
}

/** `extra`: lines for names outside test. (dnsmasq, with no upstream server, refuses a query it cannot answer from the file). */
function writeHosts(addresses: number[], extra: string[] = []): void {
  const lines = [...addresses.map((n) => `127.0.0.${n} vllm.test`), '127.0.0.4 srv-a.test', '127.0.0.5 srv-b.test', ...extra]
  writeFileSync(hosts, `${lines.join('\n')}\n`, { mode: 0o644 })
}

async function answering(addresses: number[]): Promise<void> {
  // Read back through the resolver: the router's next look will see these records.
  const r = new Resolver({ timeout: 1000, tries: 1 })
  r.setServers([`127.0.0.1:${dnsPort}`])
  const want = addresses.map((n) => `127.0.0.${n}`).sort().join(' ')
  await until(async () => (await r.resolve4('vllm.test').catch(() => [] as string[])).sort().join(' ') === want, 20_000, `dnsmasq answering ${want || 'nothing'}`)
}

/** A port free for both UDP and TCP on 127.0.0.1: dnsmasq listens on both. */
async function freePort(): Promise<number> {
  const tcp = net.createServer()
  await new Promise<void>((r) => tcp.listen(0, '127.0.0.1', r))
  const p = (tcp.address() as net.AddressInfo).port
  const udp = dgram.createSocket('udp4')
  const bound = await new Promise<boolean>((r) => {
    udp.once('error', () => r(false))
    udp.bind(p, '127.0.0.1', () => r(true))
  })
  if (bound) await new Promise<void>((r) => udp.close(() => r()))
  await new Promise<void>((r) => tcp.close(() => r()))
  return bound ? p : freePort()
}

/** Starts dnsmasq on a free port. Another process can take the port between the look and
 * dnsmasq's bind (the suite runs files in parallel), so that one failure is tried again. */
async function startDnsmasq(extra: string[]): Promise<void> {
  for (let attempt = 1; ; attempt++) {
    dnsPort = await freePort()
    const args = ['--no-daemon', `--port=${dnsPort}`, ...extra]
    dnsmasq = spawn('dnsmasq', args, { stdio: ['ignore', 'ignore', 'pipe'] })
    let err = ''
    dnsmasq.stderr!.on('data', (d: Buffer) => (err += d.toString()))
    const failed = new Promise<never>((_, reject) => {
      dnsmasq.once('error', (e) => reject(new Error(`cannot run dnsmasq (apt-get install dnsmasq-base): ${e.message}`)))
      dnsmasq.once('exit', (code) => reject(new Error(`dnsmasq exited with ${code}: ${err}`)))
    })
    try {
      await Promise.race([answering([1]), failed])
      return
    } catch (e) {
      if (attempt >= 5 || !/Address already in use/.test((e as Error).message)) throw e
    }
  }
}

beforeAll(async () => {
  const first = await startSimFleet({ instances: 1, profile: 'tiny', host: '127.0.0.1' })
  fleets.push(first)
  port = first.workers[0]!.port
  for (const n of [2, 3]) fleets.push(await startSimFleet({ instances: 1, profile: 'tiny', host: `127.0.0.${n}`, port }))
  srv = { a: await startSimFleet({ instances: 1, profile: 'tiny', host: '127.0.0.4' }), b: await startSimFleet({ instances: 1, profile: 'tiny', host: '127.0.0.5' }) }
  writeHosts([1])
  await startDnsmasq([
    '--listen-address=127.0.0.1',
    '--bind-interfaces',
    '--no-resolv',
    '--no-hosts',
    `--addn-hosts=${hosts}`,
    // Names under test. are ours: one without an AAAA record answers "no data", not "refused".
    '--local=/test/',
    `--srv-host=_vllm._tcp.test,srv-a.test,${srv.a.workers[0]!.port}`,
    `--srv-host=_vllm._tcp.test,srv-b.test,${srv.b.workers[0]!.port}`,
    '--pid-file=',
  ])
}, 60_000)

afterEach(async () => {
  await closeRouter(router, 10_000)
  router = undefined
})

afterAll(async () => {
  dnsmasq?.kill()
  await Promise.all([...fleets, srv?.a, srv?.b].map((f) => f?.close()))
  rmSync(dir, { recursive: true, force: true })
})

const server = () => `127.0.0.1:${dnsPort}`

describe('DNS discovery', () => {
  it('each address of the name is an instance; instances follow the records; a failed lookup keeps the last list', async () => {
    const s = await startDiscoveryRouter([{ type: 'dns', url: `http://vllm.test:${port}`, server: server(), intervalMs: 100 }])
    router = s.router
    expect(members(router)).toEqual([url(1)])

    let from = s.lines.length
    await records(1, 2, 3)
    await untilMembers(router, [url(1), url(2), url(3)])
    const added = await untilLog(s.lines, membershipChange, 'the additions logged', from)
    expect(added).toMatchObject({ level: 30, source: `dns http://vllm.test:${port} @${server()}`, removed: [] })
    expect((added.added as string[]).sort()).toEqual([url(2), url(3)])
    expect(await reached(router, 60)).toEqual(new Set([url(1), url(2), url(3)]))

    from = s.lines.length
    await records(2, 3)
    await untilMembers(router, [url(2), url(3)])
    expect(await untilLog(s.lines, membershipChange, 'the removal logged', from)).toMatchObject({ added: [], removed: [url(1)] })
    expect((await reached(router, 30)).has(url(1))).toBe(false)

    // The name gone from the resolver: a warning, and the fleet stays as it was.
    from = s.lines.length
    await records()
    const failed = await untilLog(s.lines, sourceFailed, 'the failed lookup reported', from)
    expect(failed).toMatchObject({ level: 40, source: `dns http://vllm.test:${port} @${server()}` })
    expect(failed.err).toMatch(/resolving 'vllm\.test' at 127\.0\.0\.1:\d+ failed: ENOTFOUND/)
    expect(members(router)).toEqual([url(2), url(3)])
    expect(await reached(router, 30)).toEqual(new Set([url(2), url(3)]))
    expect(s.lines.slice(from).filter(membershipChange)).toEqual([])

    await records(3)
    await untilMembers(router, [url(3)])
    expect(s.lines.some((l) => l.msg === 'discovery source answers again')).toBe(true)
  })

  it('a resolver that answers A and refuses AAAA: the A answer counts, the refused query is named, each family keeps its last answer', async () => {
    const r = new Resolver({ timeout: 1000, tries: 1 })
    r.setServers([server()])
    const hostsSay = async (lines: string[], a: string, aaaa: string) => {
      writeHosts([1], lines)
      dnsmasq.kill('SIGHUP')
      const six = () => r.resolve6('dual.other').then((l) => l.join(' '), (e: NodeJS.ErrnoException) => e.code ?? '')
      await until(async () => (await r.resolve4('dual.other').catch(() => [])).join(' ') === a && (await six()) === aaaa, 20_000, `dnsmasq answering ${a}, ${aaaa}`)
    }
    const v6 = `http://[::1]:${port}`
    const source = `dns http://dual.other:${port} @${server()}`
    const partial = (l: Record<string, unknown>) => l.msg === 'discovery source answered in part; keeping the failed query\'s last answer'
    await hostsSay(['127.0.0.1 dual.other'], '127.0.0.1', 'EREFUSED')
    const s = await startDiscoveryRouter([{ type: 'dns', url: `http://dual.other:${port}`, server: server(), intervalMs: 100 }])
    router = s.router
    expect(members(router)).toEqual([url(1)])
    const first = await untilLog(s.lines, partial, 'the refused AAAA query reported')
    expect(first).toMatchObject({ level: 40, source })
    expect(first.err).toMatch(/resolving 'dual\.other' at 127\.0\.0\.1:\d+: the AAAA query failed: EREFUSED; keeping its last answer \(none\)/)
    expect(await reached(router, 10)).toEqual(new Set([url(1)]))

    // Both answer: an AAAA address joins (no worker on ::1 here, so it is probed down).
    await hostsSay(['127.0.0.1 dual.other', '::1 dual.other'], '127.0.0.1', '::1')
    await until(() => s.endpoint.instances.has(v6), 20_000, 'the AAAA address listed')
    // AAAA refused again, A changed: the A list follows, the AAAA address stays from its last answer.
    let from = s.lines.length
    await hostsSay(['127.0.0.2 dual.other'], '127.0.0.2', 'EREFUSED')
    await untilMembers(router, [url(2)])
    expect([...s.endpoint.instances.keys()].sort()).toEqual([url(2), v6])
    expect((await untilLog(s.lines, partial, 'the refusal reported again', from)).err).toMatch(/the AAAA query failed: EREFUSED; keeping its last answer \(::1\)/)
    expect(await reached(router, 10)).toEqual(new Set([url(2)]))
    // Warned once while it goes on failing the same way, not every interval.
    from = s.lines.length
    await hostsSay(['127.0.0.3 dual.other'], '127.0.0.3', 'EREFUSED')
    await untilMembers(router, [url(3)])
    expect(s.lines.slice(from).filter(partial)).toEqual([])
  })

  it('static instances and DNS together: the union, and a static one stays when its address leaves DNS', async () => {
    await records(1, 2)
    const s = await startDiscoveryRouter([{ type: 'dns', url: `http://vllm.test:${port}`, server: server(), intervalMs: 100 }], { instances: [url(1), url(3)] })
    router = s.router
    expect(members(router)).toEqual([url(1), url(2), url(3)])
    const from = s.lines.length
    await records(2)
    // 127.0.0.1 is listed statically too: the endpoint keeps it, and no change is logged for it.
    await records(3)
    await untilMembers(router, [url(1), url(3)])
    const changes = s.lines.slice(from).filter(membershipChange)
    expect(changes.flatMap((l) => l.removed as string[])).toEqual([url(2)])
    expect(changes.flatMap((l) => l.added as string[])).toEqual([])
  })

  it("a name per role: each source's role is its addresses', named in its logs", async () => {
    // vllm.test for the prefill instances, decode.test for the decode ones.
    const decodeAt = async (n: number) => {
      writeHosts([1, 2], [`127.0.0.${n} decode.test`])
      dnsmasq.kill('SIGHUP')
      const r = new Resolver({ timeout: 1000, tries: 1 })
      r.setServers([server()])
      await until(async () => (await r.resolve4('decode.test').catch(() => [] as string[])).join(' ') === `127.0.0.${n}`, 20_000, `decode.test at 127.0.0.${n}`)
      await answering([1, 2])
    }
    await decodeAt(3)
    const s = await startDiscoveryRouter([
      { type: 'dns', url: `http://vllm.test:${port}`, server: server(), intervalMs: 100, role: 'prefill' },
      { type: 'dns', url: `http://decode.test:${port}`, server: server(), intervalMs: 100, role: 'decode' },
    ])
    router = s.router
    expect(roles(router)).toEqual([`${url(1)} prefill`, `${url(2)} prefill`, `${url(3)} decode`])
    expect(s.endpoint.roleCounts()).toEqual({ prefill: 2, decode: 1, both: 0 })
    // The decode name moves: the new address is a decode instance.
    const from = s.lines.length
    await decodeAt(1)
    await untilRoles(router, [`${url(1)} prefill`, `${url(2)} prefill`])
    const removed = await untilLog(s.lines, membershipChange, 'the decode address removed', from)
    expect(removed).toMatchObject({ source: `dns http://decode.test:${port} @${server()} (decode)`, removed: [url(3)] })
    // 127.0.0.1 is the prefill source's already: the first source listing an address gives it its role.
    expect(s.lines.slice(from).some((l) => typeof l.msg === 'string' && l.msg.includes('but no decode instance'))).toBe(true)
    await records(1)
  })

  it('SRV records give each target its host and port', async () => {
    const s = await startDiscoveryRouter([{ type: 'dns', url: 'http://_vllm._tcp.test', srv: true, server: server() }])
    router = s.router
    const a = `http://127.0.0.4:${srv.a.workers[0]!.port}`
    const b = `http://127.0.0.5:${srv.b.workers[0]!.port}`
    expect(members(router)).toEqual([a, b].sort())
    expect(await reached(router, 40)).toEqual(new Set([a, b]))
  })

  it('without a server, the system resolver (here /etc/hosts: localhost)', async () => {
    const s = await startDiscoveryRouter([{ type: 'dns', url: `http://localhost:${port}/` }])
    router = s.router
    expect([...s.endpoint.instances.keys()]).toContain(url(1))
    expect(members(router)).toEqual([url(1)]) // ::1, if listed, has no worker: probed down
  })

  it('prefix-router serve --upstream-dns --dns-server follows the records', async () => {
    await records(1)
    const child = spawn(process.execPath, [cli, 'serve', '--upstream-dns', `http://vllm.test:${port}`, '--dns-server', server(), '--port', '0', '--admin-port', '0', '--debug-headers', '--drain-delay-ms', '0'])
    let out = ''
    let err = ''
    child.stdout.on('data', (d: Buffer) => (out += d.toString()))
    child.stderr.on('data', (d: Buffer) => (err += d.toString()))
    try {
      await until(() => /on (http:\/\/[\d.:]+) \(admin/.test(err) || child.exitCode !== null, 30_000, 'serve to start')
      const front = /on (http:\/\/[\d.:]+) \(admin/.exec(err)?.[1]
      if (front === undefined) throw new Error(`serve did not start:\n${err}`)
      // The banner counts what discovery found, not the (empty) static list.
      expect(err).toMatch(/routing 1 instance\(s\)/)
      const ask = async () => {
        const r = await post(`${front}/v1/chat/completions`, chat(`question ${Math.random()}`, { model: MODEL, max_tokens: 1 }))
        expect(r.status).toBe(200)
        return r.headers.get('x-prefix-router-instance')
      }
      expect(await ask()).toBe(url(1))
      await records(2)
      // Its own interval (5 s by default) passes before it looks again.
      await until(async () => (await ask()) === url(2), 30_000, 'a request to reach the new worker')
      for (let i = 0; i < 10; i++) expect(await ask()).toBe(url(2))
      const changes = () => out.split('\n').filter((l) => l.includes('"msg":"discovery: membership changed"')).map((l) => JSON.parse(l) as { added?: string[] })
      // Log lines reach stdout in batches (up to LOG_FLUSH_MS apart), so the line may come after the requests it routed.
      await until(() => changes().at(-1)?.added?.includes(url(2)) === true, 30_000, 'the membership change to be logged')
      expect(changes().at(-1)).toMatchObject({ added: [url(2)], removed: [url(1)] })
    } finally {
      child.kill('SIGTERM')
      if (child.exitCode === null) await new Promise((r) => child.once('exit', r))
    }
  }, 60_000)
})

describe('serve --prefill-dns and --decode-dns', () => {
  it('find the instances of each role by name, and the banner counts them', async () => {
    writeHosts([1, 2], ['127.0.0.3 decode.test'])
    dnsmasq.kill('SIGHUP')
    await answering([1, 2])
    const r = new Resolver({ timeout: 1000, tries: 1 })
    r.setServers([server()])
    await until(async () => (await r.resolve4('decode.test').catch(() => [] as string[])).join(' ') === '127.0.0.3', 20_000, 'decode.test answering')
    const child = spawn(process.execPath, [
      cli,
      'serve',
      '--prefill-dns',
      `http://vllm.test:${port}`,
      '--decode-dns',
      `http://decode.test:${port}`,
      '--dns-server',
      server(),
      '--port',
      '0',
      '--admin-port',
      '0',
      '--drain-delay-ms',
      '0',
      '--warmup-requests',
      '0',
    ])
    let err = ''
    child.stderr.on('data', (d: Buffer) => (err += d.toString()))
    try {
      await until(() => /try:|no model known/.test(err) || child.exitCode !== null, 30_000, 'serve to start')
      expect(err).toMatch(/routing 3 instance\(s\)/)
      expect(err).toMatch(/\nprefix-router: 2 prefill \+ 1 decode, disaggregated with nixl, decode-first, threshold 256 tokens\n/)
      const admin = /\(admin (http:\/\/[\d.:]+)\)/.exec(err)![1]!
      const report = (await (await fetch(`${admin}/admin/instances`)).json()) as { endpoints: { instances: { id: string; role: string }[] }[] }
      expect(report.endpoints[0]!.instances.map((i) => `${i.id} ${i.role}`).sort()).toEqual([`${url(1)} prefill`, `${url(2)} prefill`, `${url(3)} decode`])
    } finally {
      child.kill('SIGTERM')
      if (child.exitCode === null) await new Promise((r) => child.once('exit', r))
    }
  }, 60_000)
})

describe('--upstream-dns and --dns-server refuse bad values', () => {
  const run = (args: string[]) =>
    new Promise<{ code: number | null; err: string }>((resolve) => {
      const c = spawn(process.execPath, [cli, 'serve', ...args])
      let err = ''
      c.stderr.on('data', (d: Buffer) => (err += d.toString()))
      c.once('exit', (code) => resolve({ code, err }))
    })
  it.each([
    [['--upstream-dns', 'vllm.test:8000'], /--upstream-dns must be http:\/\/NAME:PORT .*; got 'vllm\.test:8000'/],
    [['--upstream-dns', 'http://vllm.test:8000', '--dns-server', 'dns.local:53'], /--dns-server must be IP:PORT.*; got 'dns\.local:53'/],
    [['--dns-server', '127.0.0.1:53'], /--dns-server is the resolver for --upstream-dns, --prefill-dns and --decode-dns names; give one of them too/],
    [['--prefill-dns', 'prefill.test:8000'], /--prefill-dns must be http:\/\/NAME:PORT .*; got 'prefill\.test:8000'/],
    [['--decode-dns', 'http://'], /--decode-dns must be http:\/\/NAME:PORT .*; got 'http:\/\/'/],
  ])('%j', async (args, message) => {
    const r = await run(args)
    expect(r.code).toBe(2)
    expect(r.err).toMatch(message)
  })
})
