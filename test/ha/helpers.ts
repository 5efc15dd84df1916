// The HA test's real parts: Debian's HAProxy in front of `serve` replicas (the built CLI in
// child processes, so they can be SIGKILLed), and clients that say when each request began
// and ended. Every child still running when the test process ends is killed.
import { spawn, spawnSync, type ChildProcessWithoutNullStreams } from 'node:child_process'
import { existsSync } from 'node:fs'
import http from 'node:http'
import { fileURLToPath } from 'node:url'

const cli = fileURLToPath(new URL('../../dist/cli.js', import.meta.url))

const running = new Set<ChildProcessWithoutNullStreams>()
process.once('exit', () => {
  for (const c of running) c.kill('SIGKILL')
})

function track(child: ChildProcessWithoutNullStreams): Promise<number | null> {
  running.add(child)
  return new Promise((r) =>
    child.once('exit', (code) => {
      running.delete(child)
      r(code)
    }),
  )
}

/** HAProxy's binary, or an error saying how to get it: the test fails without it, never skips. */
export function haproxyBinary(): string {
  for (const p of ['/usr/sbin/haproxy', '/usr/local/sbin/haproxy']) if (existsSync(p)) return p
  const which = spawnSync('sh', ['-c', 'command -v haproxy'], { encoding: 'utf8' })
  if (which.status === 0 && which.stdout.trim() !== '') return which.stdout.trim()
  throw new Error('HAProxy is not installed: this test needs it (apt-get install haproxy; .ci/run installs it)')
}

export function builtCli(): string {
  if (!existsSync(cli)) throw new Error(`${cli} is missing: build first (npx tsc -p tsconfig.build.json)`)
  return cli
}

export interface Replica {
  name: string
  port: number
  child: ChildProcessWithoutNullStreams
  url: string
  admin: string
  /** Date.now() at spawn and when it printed that it listens. */
  spawnedAt: number
  readyAt: number
  stderr(): string
  exited: Promise<number | null>
}

/** `serve --config FILE` on a given loopback port (HAProxy's config names it); resolves once it listens. */
export function startReplica(name: string, config: string, port: number): Promise<Replica> {
  const spawnedAt = Date.now()
  const child = spawn(process.execPath, [builtCli(), 'serve', '--config', config, '--host', '127.0.0.1', '--port', String(port), '--admin-port', '0', '--log-level', 'warn', '--warmup-requests', '0', '--drain-delay-ms', '0'])
  const exited = track(child)
  let err = ''
  child.stdout.resume()
  return new Promise((resolve, reject) => {
    child.stderr.on('data', (d: Buffer) => {
      err += d.toString()
      const m = /on (http:\/\/[\d.:]+) \(admin (http:\/\/[\d.:]+)\)/.exec(err)
      if (m) resolve({ name, port, child, url: m[1]!, admin: m[2]!, spawnedAt, readyAt: Date.now(), stderr: () => err, exited })
    })
    void exited.then((code) => reject(new Error(`replica ${name} exited with ${code}:\n${err}`)))
  })
}

export async function stopReplica(r: Replica | undefined): Promise<void> {
  if (r === undefined || r.child.exitCode !== null || r.child.signalCode !== null) return
  r.child.kill('SIGKILL')
  await r.exited
}

export interface HaproxyLine {
  rid: string
  server: string
  status: number
  retries: string
  termination: string
}

export interface Haproxy {
  url: string
  stats: string
  child: ChildProcessWithoutNullStreams
  /** Its request log so far, one entry per request that ended. */
  lines(): HaproxyLine[]
  stderr(): string
  /** Lines of its stdout that are not request lines (server state changes, alerts). */
  otherLines(): string[]
  /** Server name -> status (UP, DOWN, ...) and current sessions, from the stats CSV. */
  servers(): Promise<Map<string, { status: string; scur: number; stot: number }>>
  close(): Promise<void>
}

/** The committed configuration (deploy/haproxy/haproxy.cfg): the test runs what users copy. */
export const HAPROXY_CFG = fileURLToPath(new URL('../../deploy/haproxy/haproxy.cfg', import.meta.url))

/**
 * HAProxy on deploy/haproxy/haproxy.cfg, its addresses and check timings given as the file's
 * environment variables: the front and stats on loopback, the replicas r1, r2, r3 (and r4 when
 * a fourth port is given) on `replicaPorts`, and health checks every 200 ms, one failure or
 * success enough, so that a killed or started replica is seen at once. Its request log (the
 * file's log-format: the client's x-request-id, the replica, the status, the retries and the
 * termination state) is read from its stdout.
 */
export async function startHaproxy(replicaPorts: number[], front: number, stats: number): Promise<Haproxy> {
  if (replicaPorts.length < 3 || replicaPorts.length > 4) throw new RangeError('the configuration has three replicas and a fourth slot')
  const env: NodeJS.ProcessEnv = {
    PATH: process.env.PATH,
    PR_LB_BIND: `127.0.0.1:${front}`,
    PR_LB_STATS: `127.0.0.1:${stats}`,
    ...Object.fromEntries(replicaPorts.map((port, i) => [`PR_REPLICA_${i + 1}`, `127.0.0.1:${port}`])),
    PR_CHECK_INTER: '200ms',
    PR_CHECK_FASTINTER: '100ms',
    PR_CHECK_FALL: '1',
    PR_CHECK_RISE: '1',
  }
  const file = HAPROXY_CFG
  const check = spawnSync(haproxyBinary(), ['-c', '-f', file], { encoding: 'utf8', env })
  if (check.status !== 0) throw new Error(`haproxy -c refused ${file}:\n${check.stdout}${check.stderr}`)
  const child = spawn(haproxyBinary(), ['-db', '-f', file], { env })
  const exited = track(child)
  let out = ''
  let err = ''
  const parsed: HaproxyLine[] = []
  const other: string[] = []
  child.stdout.on('data', (d: Buffer) => {
    out += d.toString()
    let nl: number
    while ((nl = out.indexOf('\n')) >= 0) {
      const line = out.slice(0, nl)
      out = out.slice(nl + 1)
      const m = /rid=(\S*) srv=(\S+) st=(-?\d+) rc=(\S+) ts=(\S+)/.exec(line)
      if (m) parsed.push({ rid: m[1]!, server: m[2]!, status: Number(m[3]), retries: m[4]!, termination: m[5]! })
      else other.push(line)
    }
  })
  child.stderr.on('data', (d: Buffer) => (err += d.toString()))
  const statsUrl = `http://127.0.0.1:${stats}/stats;csv`
  const h: Haproxy = {
    url: `http://127.0.0.1:${front}`,
    stats: statsUrl,
    child,
    lines: () => parsed,
    stderr: () => err,
    otherLines: () => other,
    async servers() {
      const csv = await (await fetch(statsUrl)).text()
      const [head, ...rows] = csv.trim().split('\n')
      const cols = head!.replace(/^# /, '').split(',')
      const at = (k: string) => cols.indexOf(k)
      const out = new Map<string, { status: string; scur: number; stot: number }>()
      for (const row of rows) {
        const f = row.split(',')
        if (f[at('pxname')] !== 'replicas' || ['FRONTEND', 'BACKEND'].includes(f[at('svname')]!)) continue
        out.set(f[at('svname')]!, { status: f[at('status')]!, scur: Number(f[at('scur')]), stot: Number(f[at('stot')]) })
      }
      return out
    },
    async close() {
      if (child.exitCode === null && child.signalCode === null) child.kill('SIGKILL')
      await exited
    },
  }
  // Up once its stats answer.
  const end = Date.now() + 20_000
  for (;;) {
    if (child.exitCode !== null) throw new Error(`haproxy exited with ${child.exitCode}:\n${err}`)
    try {
      await h.servers()
      return h
    } catch {
      if (Date.now() > end) throw new Error(`haproxy's stats never answered:\n${err}`)
      await new Promise((r) => setTimeout(r, 20))
    }
  }
}

export interface Sent {
  id: string
  /** 0: no answer (the connection failed); -1: it never ended within the client's bound. */
  status: number
  start: number
  end: number
  body: string
}

/**
 * One client: one request at a time, every request with its own x-request-id, each on a new
 * connection. Not kept alive on purpose: when a server dies before answering a request that
 * is not the first on its client connection, HAProxy closes that connection without an answer
 * and without a log line (so that the client may retry, as after an idle keep-alive close:
 * haproxy/haproxy#3414); on a fresh connection it answers 502 and logs it, which is what lets
 * the test tell from HAProxy's log where every failed request went. A request that does not
 * end within `boundMs` is cut and recorded as hung (status -1): the test then fails, so no
 * client waits for ever.
 */
export class Client {
  readonly agent = new http.Agent({ keepAlive: false, maxSockets: 1 })
  constructor(
    readonly base: string,
    readonly boundMs = 20_000,
  ) {}

  post(path: string, body: string, id: string): Promise<Sent> {
    const start = Date.now()
    return new Promise((resolve) => {
      let done = false
      const finish = (status: number, text: string) => {
        if (done) return
        done = true
        resolve({ id, status, start, end: Date.now(), body: text })
      }
      const req = http.request(`${this.base}${path}`, { method: 'POST', agent: this.agent, headers: { 'content-type': 'application/json', 'x-request-id': id } }, (res) => {
        let text = ''
        res.setEncoding('utf8')
        res.on('data', (c: string) => (text += c))
        res.on('end', () => finish(res.statusCode ?? 0, text))
        res.on('error', (e) => finish(0, String(e)))
        res.on('aborted', () => finish(0, 'aborted'))
      })
      req.setTimeout(this.boundMs, () => {
        finish(-1, 'hung')
        req.destroy()
      })
      req.on('error', (e) => finish(0, String(e)))
      req.end(body)
    })
  }

  close(): void {
    this.agent.destroy()
  }
}

/** A metric's samples summed over its label sets. */
export function metricSum(text: string, name: string): number {
  let sum = 0
  for (const line of text.split('\n')) {
    if (!line.startsWith(`${name} `) && !line.startsWith(`${name}{`)) continue
    sum += Number(line.slice(line.lastIndexOf(' ') + 1))
  }
  return sum
}

/** Waits until cond() holds (polling), failing after timeoutMs with `what`. */
export async function until(cond: () => boolean | Promise<boolean>, timeoutMs: number, what: string): Promise<void> {
  const end = Date.now() + timeoutMs
  while (!(await cond())) {
    if (Date.now() > end) throw new Error(`timed out waiting for ${what}`)
    await new Promise((r) => setTimeout(r, 20))
  }
}
