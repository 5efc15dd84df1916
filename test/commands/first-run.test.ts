// A first run of `prefix-router serve` as a newcomer meets it: a child process with real flags,
// environment and config files, real sockets on loopback. No upstream, --demo, the mistakes
// people make with URLs, ports and names, and the start banner's account of the fleet.
import { spawn, type ChildProcessWithoutNullStreams } from 'node:child_process'
import { mkdtempSync, rmSync, writeFileSync } from 'node:fs'
import net from 'node:net'
import { tmpdir } from 'node:os'
import { join } from 'node:path'
import { fileURLToPath } from 'node:url'
import { afterAll, afterEach, beforeAll, describe, expect, it } from 'vitest'
import { startSimFleet, type SimFleet } from '../../src/sim/index.js'
import { endChildren } from '../helpers/children.js'
import { freePort } from '../helpers/ports.js'
import { chat, post } from '../proxy/helpers.js'

const cli = fileURLToPath(new URL('../../dist/cli.js', import.meta.url))
const dir = mkdtempSync(join(tmpdir(), 'pr-first-run-'))
// A generous probe timeout: the banner's counts must not depend on how busy the machine is.
const patient = join(dir, 'patient.yaml')
writeFileSync(patient, 'health: { timeoutMs: 60000 }\n')

let fleet: SimFleet
const children: ChildProcessWithoutNullStreams[] = []

beforeAll(async () => {
  fleet = await startSimFleet({ instances: 2, profile: 'tiny' })
})
afterAll(async () => {
  await fleet.close()
  rmSync(dir, { recursive: true, force: true })
})
afterEach(() => endChildren(children))

/** The test runner's environment without our variables, plus `extra`. */
function envWith(extra: NodeJS.ProcessEnv = {}): NodeJS.ProcessEnv {
  const env = Object.fromEntries(Object.entries(process.env).filter(([k]) => !k.startsWith('PREFIX_ROUTER_')))
  return { ...env, ...extra }
}

function spawnCli(args: string[], env: NodeJS.ProcessEnv = {}, input?: string): ChildProcessWithoutNullStreams {
  const c = spawn(process.execPath, [cli, ...args], { env: envWith(env) })
  children.push(c)
  if (input !== undefined) c.stdin.end(input)
  return c
}

/** Runs the CLI to its exit. */
async function run(args: string[], env: NodeJS.ProcessEnv = {}, input?: string): Promise<{ status: number | null; stdout: string; stderr: string }> {
  const c = spawnCli(args, env, input ?? '')
  let stdout = ''
  let stderr = ''
  c.stdout.on('data', (d: Buffer) => (stdout += d.toString()))
  c.stderr.on('data', (d: Buffer) => (stderr += d.toString()))
  const status = await new Promise<number | null>((r) => c.once('close', (code) => r(code)))
  return { status, stdout, stderr }
}

const quiet = ['--port', '0', '--admin-port', '0', '--host', '127.0.0.1', '--log-level', 'silent', '--drain-delay-ms', '0']
// The banner ends with the sample request, or with why there is none, and with --demo the notice after it.
const BANNER_END = /(max_tokens":16\}'\n|lists what the router knows\)\n)(prefix-router: DEMO: .*\n)?$/

/** Starts serve; resolves with its URL and the banner once the banner is complete. */
function serve(args: string[], env: NodeJS.ProcessEnv = {}, end = BANNER_END): Promise<{ url: string; banner: string }> {
  const c = spawnCli(['serve', ...quiet, ...args], env)
  let err = ''
  return new Promise((resolve, reject) => {
    c.stderr.on('data', (d: Buffer) => {
      err += d.toString()
      const m = /on (http:\/\/[\d.:]+) \(admin/.exec(err)
      if (m && end.test(err)) resolve({ url: m[1]!, banner: err })
    })
    c.once('exit', (code) => reject(new Error(`serve exited with ${code}:\n${err}`)))
  })
}

describe('serve with nothing to route to', () => {
  it('refuses to start, exit 2, saying how to add an upstream or to pass --demo', async () => {
    const empty = join(dir, 'no-endpoints.yaml')
    writeFileSync(empty, 'routing: { strategy: random }\n')
    for (const args of [[], ['--config', empty]]) {
      const r = await run(['serve', ...quiet, ...args])
      expect(r.status).toBe(2)
      expect(r.stderr).toMatch(/^prefix-router: no upstream to route to/)
      expect(r.stderr).toContain('--upstream http://HOST:8000')
      expect(r.stderr).toContain('PREFIX_ROUTER_UPSTREAMS=')
      expect(r.stderr).toMatch(/--config FILE +with endpoints:/)
      expect(r.stderr).toContain('pass --demo')
    }
  })

  it('--sim-instances without --demo is refused rather than ignored', async () => {
    const r = await run(['serve', ...quiet, '--upstream', fleet.urls[0]!, '--sim-instances', '2'])
    expect(r.status).toBe(2)
    expect(r.stderr).toBe('prefix-router: --sim-instances sizes the --demo fleet; without --demo it has nothing to size\n')
  })
})

describe('serve --demo', () => {
  it('starts the embedded fleet, sized by PREFIX_ROUTER_SIM_INSTANCES, and says the answers are SIMULATED', async () => {
    const s = await serve(['--demo'], { PREFIX_ROUTER_SIM_INSTANCES: '3' })
    expect(s.banner).toMatch(/--demo: started an embedded fleet of 3 SIMULATED vLLM workers:\n( {2}http:\/\/127\.0\.0\.1:\d+\n){3}/)
    expect(s.banner).toContain('prefix-router: 3 of 3 instances healthy\n')
    expect(s.banner).toMatch(/\nprefix-router: DEMO: answers are SIMULATED/)
    const m = /curl -s (\S+) -H 'content-type: application\/json' \\\n\s+-d '(.+)'/.exec(s.banner)
    const r = await post(m![1]!, m![2]!)
    expect(r.status).toBe(200)
  })

  it('the flag beats its variable, and PREFIX_ROUTER_DEMO is its twin', async () => {
    const s = await serve(['--sim-instances', '2'], { PREFIX_ROUTER_DEMO: 'true', PREFIX_ROUTER_SIM_INSTANCES: '5' })
    expect(s.banner).toMatch(/PREFIX_ROUTER_DEMO: started an embedded fleet of 2 SIMULATED vLLM workers/)
  })

  it('with upstreams as well: an error naming both', async () => {
    const a = await run(['serve', ...quiet, '--demo', '--upstream', fleet.urls[0]!])
    expect(a.status).toBe(2)
    expect(a.stderr).toMatch(/^prefix-router: --demo and --upstream both given/)
    const b = await run(['serve', ...quiet, '--demo'], { PREFIX_ROUTER_UPSTREAMS: fleet.urls.join(',') })
    expect(b.status).toBe(2)
    expect(b.stderr).toMatch(/^prefix-router: --demo and PREFIX_ROUTER_UPSTREAMS both given/)
    const file = join(dir, 'with-endpoints.yaml')
    writeFileSync(file, `endpoints: [{ name: default, instances: [${fleet.urls[0]}] }]\n`)
    const c = await run(['serve', ...quiet, '--config', file], { PREFIX_ROUTER_DEMO: '1' })
    expect(c.status).toBe(2)
    expect(c.stderr).toContain(`PREFIX_ROUTER_DEMO and the endpoints in config file '${file}' both given`)
  })
})

describe('errors name what the user typed', () => {
  it('a variable by its name, a flag by its flag, a file value by its key path', async () => {
    // No --port here: the flag would win over the variable.
    const env = await run(['serve', '--upstream', fleet.urls[0]!], { PREFIX_ROUTER_PORT: 'abc' })
    expect(env.status).toBe(2)
    expect(env.stderr).toBe("prefix-router: PREFIX_ROUTER_PORT must be a whole number; got 'abc'\n")
    const flag = await run(['serve', ...quiet, '--upstream', fleet.urls[0]!, '--concurrency-threshold', '0'])
    expect(flag.stderr).toContain('routing.concurrencyThreshold: Too small: expected number to be >=1; got 0 (from --concurrency-threshold)')
    const viaEnv = await run(['serve', ...quiet, '--upstream', fleet.urls[0]!], { PREFIX_ROUTER_PREFIX_LENGTH: '12' })
    expect(viaEnv.stderr).toContain('routing.prefixLength: Too small: expected number to be >=1024; got 12 (from PREFIX_ROUTER_PREFIX_LENGTH)')
    const file = join(dir, 'bad-value.yaml')
    writeFileSync(file, `routing: { prefixLength: 12 }\nendpoints: [{ name: default, instances: [${fleet.urls[0]}] }]\n`)
    const fromFile = await run(['serve', ...quiet, '--config', file])
    expect(fromFile.status).toBe(2)
    expect(fromFile.stderr).toContain(`invalid config (file '${file}', environment and flags):\n  routing.prefixLength: Too small: expected number to be >=1024; got 12\n`)
  })

  it('unknown names get a "did you mean": variables, flags, config keys at their path', async () => {
    const v = await run(['serve', ...quiet], { PREFIX_ROUTER_UPSTREAM: fleet.urls[0]! })
    expect(v.status).toBe(2)
    expect(v.stderr).toMatch(/^prefix-router: unknown environment variable PREFIX_ROUTER_UPSTREAM; did you mean PREFIX_ROUTER_UPSTREAMS\?\n/)
    const f = await run(['serve', ...quiet, '--upstreams', fleet.urls[0]!])
    expect(f.status).toBe(2)
    expect(f.stderr).toBe("prefix-router: unknown option '--upstreams'; did you mean --upstream?\n")
    const none = await run(['serve', ...quiet, '--frobnicate'])
    expect(none.stderr).toBe("prefix-router: unknown option '--frobnicate'; see --help\n")
    const file = join(dir, 'typos.yaml')
    writeFileSync(file, `lsiten: { port: 0 }\nrouting: { strategi: random }\nendpoints:\n  - name: default\n    instances: [{ url: '${fleet.urls[0]}', wieght: 2 }]\n`)
    const k = await run(['serve', ...quiet, '--config', file])
    expect(k.status).toBe(2)
    expect(k.stderr).toContain("\n  unknown key 'lsiten', did you mean 'listen'?")
    expect(k.stderr).toContain("\n  routing: unknown key 'strategi', did you mean 'strategy'?")
    expect(k.stderr).toContain("\n  endpoints[0].instances[0]: unknown key 'wieght', did you mean 'weight'?")
  })
})

describe('upstream URLs', () => {
  it('without a scheme: says it needs http:// or https:// and suggests the URL, for a flag, a variable and a file', async () => {
    const f = await run(['serve', ...quiet, '--upstream', '127.0.0.1:19000'])
    expect(f.status).toBe(2)
    expect(f.stderr).toBe("prefix-router: --upstream must start with http:// or https://; got '127.0.0.1:19000' (did you mean --upstream http://127.0.0.1:19000?)\n")
    const e = await run(['serve', ...quiet], { PREFIX_ROUTER_UPSTREAMS: 'http://127.0.0.1:19001,127.0.0.1:19000' })
    expect(e.stderr).toBe("prefix-router: PREFIX_ROUTER_UPSTREAMS must start with http:// or https://; got '127.0.0.1:19000' (did you mean http://127.0.0.1:19000?)\n")
    const file = join(dir, 'no-scheme.yaml')
    writeFileSync(file, 'endpoints: [{ name: default, instances: [http://127.0.0.1:19001, "127.0.0.1:19000"] }]\n')
    const c = await run(['serve', ...quiet, '--config', file])
    expect(c.stderr).toContain('\n  endpoints[0].instances[1]: must start with http:// or https://; got "127.0.0.1:19000" (did you mean "http://127.0.0.1:19000"?)\n')
    expect(c.stderr).not.toContain('Invalid input')
  })

  it('ending in /v1: accepted, with a warning at start and a hint on its failed health check', async () => {
    const withV1 = `${fleet.urls[0]}/v1`
    const s = await serve(['--config', patient, '--upstream', withV1, '--upstream', fleet.urls[1]!])
    expect(s.banner).toContain(
      `prefix-router: warning: ${withV1} has the base path /v1, so requests will go to /v1/v1/chat/completions (an OpenAI client's base URL ends in /v1; an instance URL here does not): did you mean ${fleet.urls[0]}?\n`,
    )
    expect(s.banner).toContain('prefix-router: 1 of 2 instances healthy\n')
    expect(s.banner).toContain(`\n  ${withV1}: health check answered 404\n    the URL ends in /v1, so the health check asked for /v1/health; the router adds /v1/... itself: use ${fleet.urls[0]}\n`)
  })

  it('an instance given twice: one instance, and a warning naming it and where it was given', async () => {
    const [a, b] = fleet.urls as [string, string]
    const f = await serve(['--config', patient, '--upstream', a, '--upstream', b, '--upstream', `${a}/`])
    expect(f.banner).toContain(`prefix-router: warning: --upstream ${a} given twice: it is one instance (one weight, one share of the traffic)\n`)
    expect(f.banner).toMatch(/routing 2 instance\(s\)/)
    const e = await serve(['--config', patient], { PREFIX_ROUTER_UPSTREAMS: `${b},${b}` })
    expect(e.banner).toContain(`prefix-router: warning: PREFIX_ROUTER_UPSTREAMS lists ${b} twice: it is one instance (one weight, one share of the traffic)\n`)
    const file = join(dir, 'twice.yaml')
    writeFileSync(file, `health: { timeoutMs: 60000 }\nendpoints: [{ name: main, instances: [${a}, ${b}, ${b}] }]\n`)
    const c = await serve(['--config', file])
    expect(c.banner).toContain(`prefix-router: warning: endpoint main lists ${b} twice (endpoints[0].instances): it is one instance (one weight, one share of the traffic)\n`)
  })
})

describe('the start banner, after the first probe round', () => {
  it('counts the healthy, gives each failure its reason and hint, and a curl with a model the fleet serves', async () => {
    const closed = await freePort()
    const s = await serve(['--config', patient, '--upstream', fleet.urls[0]!, '--upstream', `http://127.0.0.1:${closed}`, '--upstream', fleet.urls[1]!])
    expect(s.banner).toContain('prefix-router: 2 of 3 instances healthy\n')
    expect(s.banner).toContain(
      `\n  http://127.0.0.1:${closed}: health check failed: connect ECONNREFUSED 127.0.0.1:${closed}\n    nothing is listening on 127.0.0.1:${closed}: is the server running`,
    )
    const m = /try:\n {2}curl -s (\S+) -H 'content-type: application\/json' \\\n\s+-d '(.+)'\n/.exec(s.banner)
    expect(JSON.parse(m![2]!)).toMatchObject({ model: 'sim-tiny' })
    const r = await post(m![1]!, m![2]!)
    expect(r.status).toBe(200)
  })

  it('h2c against an HTTP/1-only server: the hint says so, and with no model known it prints no curl', async () => {
    const s = await serve(['--config', patient, '--upstream', fleet.urls[0]!, '--upstream-protocol', 'h2c'])
    expect(s.banner).toContain('prefix-router: 0 of 1 instances healthy\n')
    expect(s.banner).toContain(`\n  ${fleet.urls[0]}: health check failed: `)
    expect(s.banner).toContain('\n    --upstream-protocol h2c needs a server that speaks HTTP/2 without TLS')
    expect(s.banner).toContain('prefix-router: no model known to try a request with')
    expect(s.banner).not.toContain('curl')
    expect(s.banner).not.toContain('MODEL')
  })
})

describe('ports in use', () => {
  async function held(): Promise<{ port: number; close: () => Promise<unknown> }> {
    const s = net.createServer()
    await new Promise<void>((r) => s.listen(0, '127.0.0.1', r))
    return { port: (s.address() as net.AddressInfo).port, close: () => new Promise((r) => s.close(r)) }
  }

  it('the front port: one line, exit 1, no stack trace; with --demo too (its fleet is closed)', async () => {
    const h = await held()
    try {
      const base = ['serve', '--host', '127.0.0.1', '--port', String(h.port), '--admin-port', '0', '--log-level', 'silent']
      const a = await run([...base, '--upstream', fleet.urls[0]!])
      expect(a.status).toBe(1)
      expect(a.stderr).toBe(`prefix-router: cannot listen on 127.0.0.1:${h.port}: address already in use (EADDRINUSE); pick another with --port\n`)
      const b = await run([...base, '--demo', '--sim-instances', '1'])
      expect(b.status).toBe(1)
      expect(b.stderr.split('\n').filter((l) => l.startsWith('prefix-router: cannot listen'))).toEqual([
        `prefix-router: cannot listen on 127.0.0.1:${h.port}: address already in use (EADDRINUSE); pick another with --port`,
      ])
      expect(b.stderr).not.toMatch(/\n\s+at /)
    } finally {
      await h.close()
    }
  })

  it('the admin port: the same, naming --admin-port', async () => {
    const h = await held()
    try {
      const r = await run(['serve', '--host', '127.0.0.1', '--port', '0', '--admin-host', '127.0.0.1', '--admin-port', String(h.port), '--log-level', 'silent', '--upstream', fleet.urls[0]!])
      expect(r.status).toBe(1)
      expect(r.stderr).toBe(`prefix-router: cannot listen on 127.0.0.1:${h.port} (admin): address already in use (EADDRINUSE); pick another with --admin-port\n`)
    } finally {
      await h.close()
    }
  })
})

describe('route (dry run) without --api, and its JSON', () => {
  const file = join(dir, 'route.yaml')
  writeFileSync(file, 'endpoints:\n  - name: default\n    instances: [http://10.1.0.1:8000, http://10.1.0.2:8000, http://10.1.0.3:8000]\n')
  type Out = { instance: string; reason: string; key: { xxh3: string; unit: string; length: number; total: number }; api: string; apiFrom: string; note: string }
  const route = async (args: string[], body: string): Promise<Out> => {
    const r = await run(['route', '--config', file, '--json', ...args], {}, body)
    expect(r.status, r.stderr).toBe(0)
    return JSON.parse(r.stdout) as Out
  }

  it('reads the API from the body: messages is chat, prompt is completions, anything else invoke bytes', async () => {
    const chatBody = chat('a shared system prompt '.repeat(10), { model: 'm' })
    const a = await route([], chatBody)
    expect(a).toMatchObject({ api: 'chat', apiFrom: 'body', reason: 'target', key: { unit: 'code_points' } })
    const explicit = await route(['--api', 'openai'], chatBody)
    expect(explicit).toMatchObject({ api: 'chat', apiFrom: 'flag', instance: a.instance, key: { xxh3: a.key.xxh3 } })
    const b = await route([], JSON.stringify({ model: 'm', prompt: 'complete me' }))
    expect(b).toMatchObject({ api: 'completions', apiFrom: 'body', key: { unit: 'code_points', length: 11 } })
    const c = await route([], 'raw invoke payload')
    expect(c).toMatchObject({ api: 'invoke', apiFrom: 'body', key: { unit: 'bytes', length: 18, total: 18 } })
  })

  it('gives machine values, with the prose in note', async () => {
    const out = await route([], 'x'.repeat(5000))
    expect(Object.keys(out).slice(0, 3)).toEqual(['instance', 'reason', 'key'])
    expect(out.instance).toMatch(/^http:\/\/10\.1\.0\.\d:8000$/)
    expect(out.reason).toBe('target')
    expect(out.key).toEqual({ xxh3: expect.stringMatching(/^[0-9a-f]{16}$/), unit: 'bytes', length: 4096, total: 5000, totalIsLowerBound: false })
    expect(out.note).toMatch(/idle/)
    const random = await route(['--strategy', 'random'], 'y')
    expect(random.reason).toBe('random')
  })
})
