// `serve --workers N` as an operator runs it (the built CLI in a child process), and the
// client side of the cluster tests: one connection per client, so that node:cluster's
// round-robin puts each on the next worker, and the worker that answered (debug headers).
import { spawn, type ChildProcessWithoutNullStreams } from 'node:child_process'
import http from 'node:http'
import { fileURLToPath } from 'node:url'
import { afterEach } from 'vitest'
import { chat, releaseHeld, startStub, until, type Stub } from '../proxy/helpers.js'

const cli = fileURLToPath(new URL('../../dist/cli.js', import.meta.url))

export interface Served {
  child: ChildProcessWithoutNullStreams
  url: string
  admin: string
  stderr(): string
  stdout(): string
  exited: Promise<number | null>
}

// A test that fails half-way must not leave a router running: whatever is still up when the
// test process ends is killed (its workers follow it).
const running = new Set<ChildProcessWithoutNullStreams>()
process.once('exit', () => {
  for (const c of running) c.kill('SIGKILL')
})

/**
 * Starts `serve` with the flags given (loopback, any free ports); resolves once it says it is
 * routing. `wrap` turns the command line into another that runs it (the router's pid is the
 * child's only if the wrapper execs it).
 */
export function serve(args: string[], wrap: (argv: string[]) => string[] = (argv) => argv): Promise<Served> {
  const [command, ...rest] = wrap([process.execPath, cli, 'serve', '--host', '127.0.0.1', '--port', '0', '--admin-port', '0', '--log-level', 'warn', '--debug-headers', ...args])
  const child = spawn(command!, rest)
  running.add(child)
  child.once('exit', () => running.delete(child))
  let err = ''
  let out = ''
  child.stdout.on('data', (d: Buffer) => (out += d.toString()))
  const exited = new Promise<number | null>((r) => child.once('exit', (code) => r(code)))
  return new Promise((resolve, reject) => {
    child.stderr.on('data', (d: Buffer) => {
      err += d.toString()
      const m = /on (http:\/\/[\d.:]+) \(admin (http:\/\/[\d.:]+)\)/.exec(err)
      if (m) resolve({ child, url: m[1]!, admin: m[2]!, stderr: () => err, stdout: () => out, exited })
    })
    void exited.then((code) => reject(new Error(`serve exited with ${code}:\n${err}`)))
  })
}

/** Stops it at once, as an operator's second signal does: the workers follow their primary. */
export async function stop(s: Served | undefined): Promise<void> {
  if (s === undefined || s.child.exitCode !== null || s.child.signalCode !== null) return
  const gone = () => s.child.exitCode !== null || s.child.signalCode !== null
  // Bounds for a clean-up after a failure, never for a result: a router that does not stop is killed.
  const within = (ms: number, p: Promise<unknown>) => Promise.race([p, new Promise((r) => setTimeout(r, ms).unref())])
  s.child.kill('SIGTERM')
  await within(10_000, until(() => gone() || s.stderr().includes('draining'), 10_000, 'the drain to begin').catch(() => undefined))
  if (!gone()) s.child.kill('SIGTERM')
  await within(10_000, s.exited)
  if (!gone()) s.child.kill('SIGKILL')
  await s.exited
}

export interface Answer {
  status: number
  headers: http.IncomingHttpHeaders
  body: string
}

/**
 * A client with a connection of its own, kept alive between its requests: every request
 * it makes goes to the same worker.
 */
export class Client {
  readonly agent = new http.Agent({ keepAlive: true, maxSockets: 1 })
  constructor(readonly base: string) {}

  request(method: string, path: string, body?: string): Promise<Answer> {
    return new Promise((resolve, reject) => {
      const req = http.request(`${this.base}${path}`, { method, agent: this.agent, headers: body === undefined ? {} : { 'content-type': 'application/json' } }, (res) => {
        let text = ''
        res.setEncoding('utf8')
        res.on('data', (c: string) => (text += c))
        res.on('end', () => resolve({ status: res.statusCode!, headers: res.headers, body: text }))
        res.on('error', reject)
      })
      req.on('error', reject)
      req.end(body)
    })
  }

  /** The pid of the worker this client's connection is on. */
  async worker(): Promise<string> {
    const r = await this.request('GET', '/health')
    const pid = r.headers['x-prefix-router-worker']
    if (typeof pid !== 'string') throw new Error(`no x-prefix-router-worker header (status ${r.status})`)
    return pid
  }

  chat(prefix: string): Promise<Answer> {
    return this.request('POST', '/v1/chat/completions', chat(prefix))
  }

  close(): void {
    this.agent.destroy()
  }
}

/** New clients until `n` of them are on different workers (node:cluster hands connections round-robin). */
export async function clientsOnDistinctWorkers(base: string, n: number): Promise<{ client: Client; pid: string }[]> {
  const out = new Map<string, Client>()
  for (let tries = 0; out.size < n; tries++) {
    if (tries >= 10 * n) throw new Error(`only ${out.size} distinct workers after ${tries} connections`)
    const c = new Client(base)
    const pid = await c.worker()
    if (out.has(pid)) c.close()
    else out.set(pid, c)
  }
  return [...out].map(([pid, client]) => ({ client, pid }))
}

/** A metric's samples summed over its label sets (those whose labels contain `having`, if given). */
export function metricSum(text: string, name: string, having = ''): number {
  let sum = 0
  for (const line of text.split('\n')) {
    if (!line.startsWith(`${name} `) && !line.startsWith(`${name}{`)) continue
    if (!line.slice(0, line.lastIndexOf(' ')).includes(having)) continue
    sum += Number(line.slice(line.lastIndexOf(' ') + 1))
  }
  return sum
}

export async function metrics(admin: string): Promise<string> {
  return (await fetch(`${admin}/metrics`)).text()
}

/** Waits until the aggregated metric reaches `value` (the test's own timeout is the bound). */
export async function untilMetric(admin: string, name: string, value: number, having = ''): Promise<void> {
  await until(async () => metricSum(await metrics(admin), name, having) === value, 50_000, `${name}${having} = ${value}`)
}

/**
 * An upstream that holds chat requests open while `hold` is set; its health, models and
 * metrics (the primary's probes) are answered at once, so `held` counts requests only.
 */
export async function holdingStub(name: string): Promise<Stub> {
  const stub: Stub = await startStub(name, (req, res) => {
    if (req.url === '/v1/chat/completions' && stub.hold) return void stub.held.push(res)
    if (req.url !== '/v1/chat/completions') {
      res.writeHead(req.url === '/health' ? 200 : 404)
      return void res.end()
    }
    res.writeHead(200, { 'content-type': 'application/json' })
    res.end(JSON.stringify({ stub: name }))
  })
  return stub
}

/** A test's stubs, router and clients, torn down after each test whatever it left held. */
export function clusterFixture(): { stubs: Stub[]; served: Served | undefined; clients: Client[] } {
  const f: { stubs: Stub[]; served: Served | undefined; clients: Client[] } = { stubs: [], served: undefined, clients: [] }
  afterEach(async () => {
    releaseHeld(f.stubs)
    for (const c of f.clients.splice(0)) c.close()
    await stop(f.served)
    f.served = undefined
    await Promise.all(f.stubs.map((s) => s.close()))
    f.stubs = []
  })
  return f
}
