// The packages only one feature needs are optional peers: an install without them must run
// the proxy (serve --demo answers a chat), and each feature that needs one must stop with
// the coded message naming it and the npm command. The install here is real: a node_modules
// folder outside the repository holding a copy of the built package and its dependencies,
// where the optional packages are not, so Node's own resolution does not find them.
import { spawn } from 'node:child_process'
import { cpSync, existsSync, mkdirSync, mkdtempSync, readFileSync, rmSync, symlinkSync, writeFileSync } from 'node:fs'
import { tmpdir } from 'node:os'
import { dirname, join } from 'node:path'
import { fileURLToPath } from 'node:url'
import { afterAll, afterEach, beforeAll, describe, expect, it } from 'vitest'
import { MissingPackageError, OPTIONAL_FEATURES, type OptionalFeature } from '../../src/core/optional-packages.js'
import { endChildren } from '../helpers/children.js'
import { post } from '../proxy/helpers.js'

const root = fileURLToPath(new URL('../..', import.meta.url))
const pkg = JSON.parse(readFileSync(join(root, 'package.json'), 'utf8')) as {
  dependencies: Record<string, string>
  devDependencies: Record<string, string>
  peerDependencies: Record<string, string>
  peerDependenciesMeta: Record<string, { optional?: boolean }>
}
const optional = [...new Set(Object.values(OPTIONAL_FEATURES).flatMap((f) => f.packages))].sort()

describe('package.json', () => {
  it('lists every optional package as an optional peer, pinned in devDependencies at the peer range’s lower bound, and none as a dependency', () => {
    expect(Object.keys(pkg.peerDependencies).sort()).toEqual(optional)
    for (const name of optional) {
      expect(pkg.dependencies[name], name).toBeUndefined()
      expect(pkg.peerDependenciesMeta[name], name).toEqual({ optional: true })
      expect(`^${pkg.devDependencies[name]}`, name).toBe(pkg.peerDependencies[name])
    }
  })
})

describe('deploy/Dockerfile', () => {
  it('keeps in the image only optional peers, each pinned in devDependencies (a name that is neither would be dropped without a word)', () => {
    const dockerfile = readFileSync(join(root, 'deploy', 'Dockerfile'), 'utf8')
    const list = /for \(const n of \[([^\]]+)\]\) \{ p\.dependencies\[n\] = p\.devDependencies\[n\]/.exec(dockerfile)
    expect(list, 'the step that keeps optional packages in the image').not.toBeNull()
    const kept = [...list![1]!.matchAll(/'([^']+)'/g)].map((m) => m[1]!)
    expect(kept.length).toBeGreaterThan(0)
    for (const name of kept) {
      expect(pkg.peerDependencies[name], name).toBeDefined()
      expect(pkg.devDependencies[name], name).toBeDefined()
    }
    // The image serves Kubernetes deployments: discovery, the endpoint picker and KV events at least.
    expect(kept).toEqual(expect.arrayContaining(['@kubernetes/client-node', ...OPTIONAL_FEATURES.epp.packages, 'zeromq']))
  })
})

const dir = mkdtempSync(join(tmpdir(), 'pr-lean-'))
const installed = join(dir, 'node_modules', 'prefix-router')
const cli = join(installed, 'dist', 'cli.js')

beforeAll(() => {
  // The package as npm lays it out: its files (dist/ must be built), and beside it only its dependencies.
  if (!existsSync(join(root, 'dist', 'cli.js'))) throw new Error('dist/ is not built: run npx tsc -p tsconfig.build.json first')
  mkdirSync(installed, { recursive: true })
  cpSync(join(root, 'dist'), join(installed, 'dist'), { recursive: true })
  cpSync(join(root, 'package.json'), join(installed, 'package.json'))
  for (const d of ['prebuilds', 'build']) if (existsSync(join(root, d))) symlinkSync(join(root, d), join(installed, d))
  for (const name of Object.keys(pkg.dependencies)) {
    mkdirSync(dirname(join(dir, 'node_modules', name)), { recursive: true })
    symlinkSync(join(root, 'node_modules', name), join(dir, 'node_modules', name))
  }
})
afterAll(() => rmSync(dir, { recursive: true, force: true }))

const children: ReturnType<typeof spawn>[] = []
afterEach(() => endChildren(children))

function start(args: string[]) {
  const env = Object.fromEntries(Object.entries(process.env).filter(([k]) => !k.startsWith('PREFIX_ROUTER_') && k !== 'NODE_PATH'))
  const c = spawn(process.execPath, args, { cwd: dir, env, stdio: ['ignore', 'pipe', 'pipe'] })
  children.push(c)
  return c
}

async function run(args: string[]): Promise<{ status: number | null; stdout: string; stderr: string }> {
  const c = start(args)
  let stdout = ''
  let stderr = ''
  c.stdout!.on('data', (d: Buffer) => (stdout += d.toString()))
  c.stderr!.on('data', (d: Buffer) => (stderr += d.toString()))
  const status = await new Promise<number | null>((r) => c.once('close', (code) => r(code)))
  return { status, stdout, stderr }
}

/** What the CLI prints when every package of `features` is missing: one line, its code first. */
const missing = (...features: OptionalFeature[]) => `prefix-router: ERR_MISSING_PACKAGE: ${new MissingPackageError(features.map((feature) => ({ feature, packages: OPTIONAL_FEATURES[feature].packages }))).message}\n`
const quiet = ['--port', '0', '--admin-port', '0', '--host', '127.0.0.1', '--log-level', 'silent', '--drain-delay-ms', '0']

describe('installed without the optional packages', () => {
  it('really lacks them: none resolves from the installed package', async () => {
    const probe = `const r = require('node:module').createRequire(${JSON.stringify(cli)}); const found = []; for (const n of ${JSON.stringify(optional)}) { try { r.resolve(n); found.push(n) } catch {} } console.log(JSON.stringify(found))`
    const r = await run(['-e', probe])
    expect(r.stderr).toBe('')
    expect(JSON.parse(r.stdout)).toEqual([])
  })

  it('the library loads and routes', async () => {
    const r = await run(['--input-type=module', '-e', "const { Router } = await import('prefix-router'); const r = new Router({ instances: [{ id: 'a' }, { id: 'b' }] }); const lease = r.pick('hello'); console.log(['a', 'b'].includes(lease.instance)); lease.release(); await import('prefix-router/sim')"])
    expect(r.stderr).toBe('')
    expect(r.stdout).toBe('true\n')
  })

  it('serve --demo starts and answers a chat', async () => {
    const c = start([cli, 'serve', ...quiet, '--demo', '--sim-instances', '2'])
    let err = ''
    const banner = await new Promise<string>((resolve, reject) => {
      c.stderr!.on('data', (d: Buffer) => {
        err += d.toString()
        if (err.includes('DEMO: answers are SIMULATED')) resolve(err)
      })
      c.once('exit', (code) => reject(new Error(`serve exited with ${code}:\n${err}`)))
    })
    // The request the banner suggests, as a newcomer would paste it.
    const m = /curl -s (\S+) -H 'content-type: application\/json' \\\n\s+-d '(.+)'/.exec(banner)
    expect(m, banner).not.toBeNull()
    const r = await post(m![1]!, m![2]!)
    expect(r.status).toBe(200)
    expect(JSON.parse(r.text)).toMatchObject({ object: 'chat.completion' })
  })

  it('epp --help and --version need none of them', async () => {
    const help = await run([cli, 'epp', '--help'])
    expect(help.stderr).toBe('')
    expect(help.stdout).toMatch(/^usage: prefix-router epp /)
    expect(help.stdout).toContain('--grpc-tls on|off')
    expect(help.status).toBe(0)
    const check = await run([cli, 'epp-check', '--help'])
    expect([check.status, check.stderr]).toEqual([0, ''])
    expect(check.stdout).toMatch(/^usage: prefix-router epp-check HOST:PORT/)
    const version = await run([cli, 'epp', '--version'])
    expect([version.status, version.stderr, version.stdout]).toEqual([0, '', `${JSON.parse(readFileSync(join(root, 'package.json'), 'utf8')).version}\n`])
  })

  it('every missing package at once, in one message and one npm command', () => {
    const e = new MissingPackageError([
      { feature: 'kubernetes', packages: ['@kubernetes/client-node'] },
      { feature: 'kvEvents', packages: ['zeromq'] },
      { feature: 'simKvEvents', packages: ['zeromq'] },
    ])
    expect(e.message).toBe(
      "Kubernetes discovery (kubernetes and inferencePool sources) needs @kubernetes/client-node, the exact cache view (kvEvents, --kv-events-port) needs zeromq and the simulator's KV-event publisher (--kv-events-port) needs zeromq, optional packages that are not installed; install them beside prefix-router: npm install @kubernetes/client-node@1.4.0 zeromq@6.8.0",
    )
    expect(e.details).toEqual({ features: ['kubernetes', 'kvEvents', 'simKvEvents'], packages: ['@kubernetes/client-node', 'zeromq'], command: 'npm install @kubernetes/client-node@1.4.0 zeromq@6.8.0' })
  })

  it('serve names everything its flags and file need, before the demo fleet starts', async () => {
    const cfg = join(dir, 'all.yaml')
    writeFileSync(cfg, 'kvEvents: { port: 5557 }\nendpoints: [{ name: default, instances: [http://127.0.0.1:9], discovery: [{ type: kubernetes, service: vllm }] }]\n')
    const a = await run([cli, 'serve', ...quiet, '--config', cfg, '--share-load', 'redis://127.0.0.1:9', '--tokenizer', 'local', '--tokenizer-path', join(dir, 'model')])
    expect(a.stderr).toBe(missing('kvEvents', 'kubernetes', 'shareLoad', 'localTokenizer'))
    expect(a.status).toBe(1)
    // The demo fleet would have been the first thing started: nothing is.
    const b = await run([cli, 'serve', ...quiet, '--demo', '--kv-events-port', '5557', '--tokenizer', 'o200k'])
    expect(b.stderr).toBe(missing('kvEvents', 'o200k'))
    expect(b.status).toBe(1)
  })

  it('epp names its gRPC packages and what its configuration needs at once', async () => {
    const r = await run([cli, 'epp', '--upstream', 'http://127.0.0.1:9', '--kv-events-port', '5557', '--tokenizer', 'o200k'])
    expect(r.stderr).toBe(missing('epp', 'kvEvents', 'o200k'))
    expect(r.status).toBe(1)
  })

  it('epp-check needs the gRPC packages to run', async () => {
    const r = await run([cli, 'epp-check', '127.0.0.1:9'])
    expect([r.status, r.stderr]).toEqual([1, missing('epp')])
  })

  it('epp stops with the message naming the gRPC packages and the npm command', async () => {
    const r = await run([cli, 'epp'])
    expect(r.stderr).toBe(missing('epp'))
    expect(r.stderr).toContain('npm install @grpc/grpc-js@1.14.7 @grpc/grpc-js-xds@1.14.1 @grpc/proto-loader@0.8.1 protobufjs@7.6.6 selfsigned@5.5.0')
    expect(r.status).toBe(1)
  })

  it('Kubernetes discovery and KV events stop serve before it listens', async () => {
    const k8s = join(dir, 'k8s.yaml')
    writeFileSync(k8s, 'endpoints: [{ name: default, discovery: [{ type: kubernetes, service: vllm }] }]\n')
    const a = await run([cli, 'serve', ...quiet, '--config', k8s])
    expect(a.stderr).toBe(missing('kubernetes'))
    expect(a.status).toBe(1)
    const kv = join(dir, 'kv.yaml')
    writeFileSync(kv, 'kvEvents: { port: 5557 }\nendpoints: [{ name: default, instances: [http://127.0.0.1:9] }]\n')
    const b = await run([cli, 'serve', ...quiet, '--config', kv])
    expect(b.stderr).toBe(missing('kvEvents'))
    expect(b.status).toBe(1)
  })

  it('a local tokenizer and sharing load through Redis stop serve too', async () => {
    const upstream = ['--upstream', 'http://127.0.0.1:9']
    const a = await run([cli, 'serve', ...quiet, ...upstream, '--kv-events-port', '5557', '--tokenizer', 'local', '--tokenizer-path', join(dir, 'model')])
    expect(a.stderr).toBe(missing('kvEvents', 'localTokenizer'))
    expect(a.status).toBe(1)
    const b = await run([cli, 'serve', ...quiet, ...upstream, '--share-load', 'redis://127.0.0.1:9'])
    expect(b.stderr).toBe(missing('shareLoad'))
    expect(b.status).toBe(1)
  })

  it("the simulator's o200k tokenizer and KV-event publisher, alone and together", async () => {
    const a = await run([cli, 'sim', '--port', '0', '--instances', '1', '--tokenizer', 'o200k'])
    expect(a.stderr).toBe(missing('o200k'))
    expect(a.status).toBe(1)
    const b = await run([cli, 'sim', '--port', '0', '--instances', '1', '--kv-events-port', '0'])
    expect(b.stderr).toBe(missing('simKvEvents'))
    expect(b.status).toBe(1)
    const c = await run([cli, 'sim', '--port', '0', '--instances', '1', '--tokenizer', 'o200k', '--kv-events-port', '0'])
    expect(c.stderr).toBe(missing('o200k', 'simKvEvents'))
    expect(c.status).toBe(1)
  })

  it("replay's charts: refused before the run, not after it", async () => {
    const r = await run([cli, 'replay', '--duration', '1s', '--strategies', 'random', '--out', join(dir, 'replay-out'), '--quiet'])
    expect(r.stderr).toBe(missing('charts'))
    expect(r.stdout).toBe('')
    expect(r.status).toBe(1)
  })
})
