// The deployment kit (deploy/) against the program it deploys: every overlay rendered with
// kubectl kustomize, its configuration read by the router's own parseConfig, its flags and
// variables by the CLI's own parser, its probe paths and the dashboard's metrics by a running
// router, the Dockerfile's inputs by the tree. A rename on either side fails here.
import { spawn, spawnSync } from 'node:child_process'
import { existsSync, readdirSync, readFileSync, statSync } from 'node:fs'
import { join } from 'node:path'
import { fileURLToPath } from 'node:url'
import { parseAllDocuments } from 'yaml'
import { afterAll, beforeAll, describe, expect, it } from 'vitest'
import { ConfigSchema, parseConfig, type Config } from '../../src/config/config.js'
import { ProxyServer } from '../../src/proxy/proxy.js'
import { startSimFleet, type SimFleet } from '../../src/sim/index.js'
import { copyParts, envNames, exposedMetrics, ignored, instructionArgs, isExposed, parseDockerfile, promqlMetricNames } from './parse.js'

const root = fileURLToPath(new URL('../..', import.meta.url))
const deploy = join(root, 'deploy')
const overlaysDir = join(deploy, 'kubernetes', 'overlays')
const overlayNames = readdirSync(overlaysDir).filter((d) => statSync(join(overlaysDir, d)).isDirectory())
// The endpoint picker's overlay runs `epp` (no HTTP front of its own): checked on its own below.
const EPP_OVERLAY = 'gateway-api'
const serveOverlays = overlayNames.filter((o) => o !== EPP_OVERLAY)
// The disaggregated overlay brings its own vLLM fleet (prefill and decode Deployments): checked on its own below.
const PD_OVERLAY = 'pd-nixl'

type Manifest = { apiVersion: string; kind: string; metadata: { name: string; namespace?: string; labels?: Record<string, string> }; [k: string]: any }

// --- the program's side -----------------------------------------------------------------------

/** The CLI as the image runs it, from the sources in the tree (dist/ may be stale). */
function cli(args: string[], env: NodeJS.ProcessEnv = {}, nodeFlags: string[] = []) {
  return spawnSync(process.execPath, [...nodeFlags, '--import', 'tsx', join(root, 'src/cli.ts'), ...args], {
    cwd: root,
    encoding: 'utf8',
    env: { ...process.env, ...env },
    timeout: 60_000,
  })
}

/** Whether `serve` accepts these arguments: its strict parser runs before --help is answered. */
function serveAccepts(args: readonly string[]): { ok: boolean; why: string } {
  const r = cli([...args, '--help'])
  return { ok: r.status === 0, why: `exit ${r.status}: ${r.stderr.trim().split('\n').slice(-3).join(' | ')}` }
}

/**
 * Every PREFIX_ROUTER_* variable the program knows: those `serve --help` names, and every such
 * name in the exports of the command modules that mention them (the flag table, wherever it is).
 */
async function knownEnv(): Promise<Set<string>> {
  const names = new Set<string>()
  const pattern = /PREFIX_ROUTER_[A-Z0-9_]+/g
  const help = cli(['serve', '--help'])
  for (const m of help.stdout.matchAll(pattern)) names.add(m[0])
  const dir = join(root, 'src/commands')
  for (const f of readdirSync(dir).filter((f) => f.endsWith('.ts'))) {
    if (!readFileSync(join(dir, f), 'utf8').includes('PREFIX_ROUTER_')) continue
    const mod = (await import(join(dir, f))) as Record<string, unknown>
    const seen = new Set<unknown>()
    const walk = (v: unknown): void => {
      if (typeof v === 'string') {
        if (/^PREFIX_ROUTER_[A-Z0-9_]+$/.test(v)) names.add(v)
      } else if (v !== null && typeof v === 'object' && !seen.has(v)) {
        seen.add(v)
        for (const [k, x] of v instanceof Map ? v.entries() : Object.entries(v)) {
          walk(k)
          walk(x)
        }
      }
    }
    walk(mod)
  }
  return names
}

/** The configuration with its endpoints pointed at `url` and its ports on loopback, for a live run. */
function onLoopback(raw: Record<string, any>, url: string): Config {
  const endpoints = ((raw.endpoints as { name: string }[] | undefined) ?? [{ name: 'default' }]).map((e) => ({ name: e.name, instances: [url] }))
  return parseConfig({
    ...raw,
    listen: { ...raw.listen, host: '127.0.0.1', port: 0 },
    admin: { ...raw.admin, host: '127.0.0.1', port: 0 },
    log: { level: 'silent' },
    endpoints,
  })
}

/** What a configuration sets regardless of its endpoints: ports, drain, TLS. */
function settled(raw: Record<string, any>): Config {
  return parseConfig({ ...raw, endpoints: ((raw.endpoints as { name: string }[] | undefined) ?? []).map((e) => ({ name: e.name, instances: ['http://127.0.0.1:1'] })) })
}

const usesDiscovery = (raw: Record<string, any>) => ((raw.endpoints as Record<string, unknown>[] | undefined) ?? []).some((e) => e.discovery !== undefined)

const isLoopback = (host: string) => /^(127\.|localhost$|::1$|\[::1\]$)/.test(host)

// --- the kit's side ---------------------------------------------------------------------------

function kubectl(): string {
  const r = spawnSync('kubectl', ['version', '--client'], { encoding: 'utf8' })
  if (r.error) throw new Error(`kubectl is needed to render deploy/kubernetes (Debian's kubernetes-client): ${r.error.message}`)
  return 'kubectl'
}

function render(overlay: string): Manifest[] {
  const r = spawnSync(kubectl(), ['kustomize', join(overlaysDir, overlay)], { encoding: 'utf8', timeout: 60_000 })
  if (r.status !== 0) throw new Error(`kubectl kustomize ${overlay} failed: ${r.stderr}`)
  return parseAllDocuments(r.stdout)
    .map((d) => d.toJS() as Manifest | null)
    .filter((d): d is Manifest => d !== null)
}

const one = (ms: Manifest[], kind: string, name?: string): Manifest => {
  const found = ms.filter((m) => m.kind === kind && (name === undefined || m.metadata.name === name))
  expect(found, `${kind}${name ? ` ${name}` : ''}`).toHaveLength(1)
  return found[0]!
}

interface Rendered {
  manifests: Manifest[]
  deployment: Manifest
  container: any
  /** The config file the Deployment passes with --config, read from its ConfigMap. */
  raw: Record<string, any>
  configMap: Manifest
}

function inspect(manifests: Manifest[]): Rendered {
  // The router's: an overlay may bring the model servers' Deployments too.
  const deployment = one(manifests, 'Deployment', 'prefix-router')
  const pod = deployment.spec.template.spec
  expect(pod.containers).toHaveLength(1)
  const container = pod.containers[0]
  const args: string[] = container.args ?? []
  const at = args.indexOf('--config')
  expect(at, 'the Deployment passes --config').toBeGreaterThanOrEqual(0)
  const file = args[at + 1]!
  const mount = (container.volumeMounts as { name: string; mountPath: string; subPath?: string }[]).find((m) => file.startsWith(`${m.mountPath.replace(/\/$/, '')}/`))
  expect(mount, `a volume mounted where ${file} is`).toBeDefined()
  const key = mount!.subPath ?? file.slice(mount!.mountPath.replace(/\/$/, '').length + 1)
  const volume = (pod.volumes as { name: string; configMap?: { name: string } }[]).find((v) => v.name === mount!.name)
  expect(volume?.configMap, `volume ${mount!.name} is a ConfigMap`).toBeDefined()
  const configMap = one(manifests, 'ConfigMap', volume!.configMap!.name)
  const text = configMap.data?.[key] as string | undefined
  expect(text, `ConfigMap ${configMap.metadata.name} holds ${key}`).toBeTypeOf('string')
  const docs = parseAllDocuments(text!)
  expect(docs).toHaveLength(1)
  return { manifests, deployment, container, raw: docs[0]!.toJS() as Record<string, any>, configMap }
}

const dockerfileText = readFileSync(join(deploy, 'Dockerfile'), 'utf8')
const dockerfile = parseDockerfile(dockerfileText)
const finalStage = Math.max(...dockerfile.map((i) => i.stage))
const inFinal = (op: string) => dockerfile.filter((i) => i.op === op && i.stage === finalStage)

// --- a live router: the static overlay's configuration in front of one simulator worker -------

let fleet: SimFleet
let proxy: ProxyServer
let env: Set<string>
const rendered = new Map<string, Rendered>()

beforeAll(async () => {
  for (const o of overlayNames) rendered.set(o, inspect(render(o)))
  env = await knownEnv()
  fleet = await startSimFleet({ instances: 1, profile: 'tiny' })
  proxy = await ProxyServer.start(onLoopback(rendered.get('static')!.raw, fleet.urls[0]!))
}, 120_000)

afterAll(async () => {
  await proxy?.close()
  await fleet?.close()
})

describe('the checks themselves', () => {
  it('find what they look for, and miss what is not there', () => {
    expect(promqlMetricNames('histogram_quantile(0.9, sum by (le, $instance_label) (rate(a_seconds_bucket{x=~"$v"}[$__rate_interval]))) / b_total offset 5m')).toEqual([
      'a_seconds_bucket',
      'b_total',
    ])
    const m = exposedMetrics('# TYPE h histogram\n# TYPE c_total counter\n')
    expect(isExposed(m, 'h_bucket')).toBe(true)
    expect(isExposed(m, 'c_total_bucket')).toBe(false)
    expect(isExposed(m, 'nope')).toBe(false)
    expect(ignored(['**/node_modules', 'dist/'], 'a/node_modules/x')).toBe(true)
    expect(ignored(['dist/'], 'src/dist.ts')).toBe(false)
    expect(serveAccepts(['serve', '--no-such-flag-for-this-test']).ok, 'serve --help must still refuse an unknown flag').toBe(false)
    expect(env.has('PREFIX_ROUTER_CONFIG'), 'the known variables were found').toBe(true)
    expect(env.has('PREFIX_ROUTER_NO_SUCH_VARIABLE')).toBe(false)
  })
})

describe('deploy/kubernetes overlays', () => {
  it('are static, dns, kubernetes, pd-nixl (prefill and decode pods), and gateway-api for the endpoint picker', () => {
    expect(overlayNames.sort()).toEqual(['dns', 'gateway-api', 'kubernetes', 'pd-nixl', 'static'])
  })

  describe.each(serveOverlays)('%s', (overlay) => {
    const r = () => rendered.get(overlay)!

    it("its ConfigMap's configuration is valid for the program", () => {
      expect(() => parseConfig(r().raw, `deploy/kubernetes/overlays/${overlay}`)).not.toThrow()
    })

    it('uses discovery exactly when the overlay is not static', () => {
      expect(usesDiscovery(r().raw)).toBe(overlay !== 'static')
    })

    it("exposes the configuration's ports, and no flag or variable moves them", () => {
      const { container, raw } = r()
      const config = settled(raw)
      const ports = new Map((container.ports as { name: string; containerPort: number }[]).map((p) => [p.name, p.containerPort]))
      expect(ports.get('http')).toBe(config.listen.port)
      expect(ports.get('metrics')).toBe(config.admin.port)
      const args: string[] = container.args
      for (const f of ['--port', '--admin-port', '--host']) expect(args).not.toContain(f)
      const names = ((container.env ?? []) as { name: string }[]).map((e) => e.name)
      for (const n of ['PREFIX_ROUTER_PORT', 'PREFIX_ROUTER_ADMIN_PORT', 'PREFIX_ROUTER_HOST']) expect(names).not.toContain(n)
    })

    it('opens the admin port beyond loopback, so that Prometheus can scrape it', () => {
      const { container, raw } = r()
      const set = ((container.env ?? []) as { name: string; value?: string }[]).find((e) => e.name === 'PREFIX_ROUTER_ADMIN_HOST')?.value
      expect(isLoopback(set ?? settled(raw).admin.host)).toBe(false)
    })

    it('gives the drain its time: terminationGracePeriodSeconds exceeds drain.delayMs + drain.timeoutMs by 5 s or more', () => {
      const { deployment, raw } = r()
      const { delayMs, timeoutMs } = settled(raw).drain
      expect(deployment.spec.template.spec.terminationGracePeriodSeconds * 1000).toBeGreaterThanOrEqual(delayMs + timeoutMs + 5000)
      expect(r().container.lifecycle?.preStop, 'the router keeps accepting during its drain delay itself').toBeUndefined()
    })

    it('probes routes the router answers, on its front port', async () => {
      const { container, raw } = r()
      const config = settled(raw)
      const ports = new Map((container.ports as { name: string; containerPort: number }[]).map((p) => [p.name, p.containerPort]))
      const probes = { readinessProbe: '/health', livenessProbe: '/ping' } as const
      for (const [probe, path] of Object.entries(probes)) {
        const get = container[probe]?.httpGet as { path: string; port: string | number; scheme?: string } | undefined
        expect(get?.path, probe).toBe(path)
        expect(typeof get!.port === 'number' ? get!.port : ports.get(get!.port), `${probe} port`).toBe(config.listen.port)
        expect((get!.scheme ?? 'HTTP').toLowerCase()).toBe(config.tls ? 'https' : 'http')
        const res = await fetch(`${proxy.url}${get!.path}`)
        expect(res.status, `GET ${get!.path} on a running router`).toBe(200)
      }
    })

    it('passes only flags serve accepts, and only variables it knows', () => {
      const { container } = r()
      const args: string[] = container.args
      expect(args[0]).toBe('serve')
      const accepted = serveAccepts(args)
      expect(accepted.ok, `serve ${args.join(' ')}: ${accepted.why}`).toBe(true)
      for (const e of (container.env ?? []) as { name: string }[]) expect(env.has(e.name), `${e.name} is a variable serve reads`).toBe(true)
    })

    it('runs as the image user, non-root, on a read-only root filesystem', () => {
      const { deployment, container } = r()
      const pod = deployment.spec.template.spec
      const user = inFinal('USER').at(-1)!.rest.split(':')[0]
      expect(pod.securityContext.runAsNonRoot).toBe(true)
      expect(String(pod.securityContext.runAsUser)).toBe(user)
      expect(container.securityContext.readOnlyRootFilesystem).toBe(true)
      expect(container.securityContext.allowPrivilegeEscalation).toBe(false)
      expect(container.resources?.requests?.memory).toBeDefined()
    })

    it("has Services that reach the pod's front and admin ports", () => {
      const { manifests, deployment, container, raw } = r()
      const config = settled(raw)
      const labels = deployment.spec.template.metadata.labels as Record<string, string>
      const ports = new Map((container.ports as { name: string; containerPort: number }[]).map((p) => [p.name, p.containerPort]))
      const selects = (selector: Record<string, string>, l: Record<string, string>) => Object.entries(selector).every(([k, v]) => l[k] === v)
      // Every other Service is the model servers' the overlay brings: it selects one of their Deployments' pods.
      const others = manifests.filter((m) => m.kind === 'Deployment' && m !== deployment).map((d) => d.spec.template.metadata.labels as Record<string, string>)
      const targets = manifests
        .filter((m) => m.kind === 'Service')
        .flatMap((s) => {
          const selector = s.spec.selector as Record<string, string>
          if (!selects(selector, labels)) {
            expect(others.some((l) => selects(selector, l)), `${s.metadata.name} selects the router's pods or the fleet's`).toBe(true)
            return []
          }
          return (s.spec.ports as { targetPort: string | number }[]).map((p) => (typeof p.targetPort === 'number' ? p.targetPort : ports.get(p.targetPort)))
        })
      expect(targets.sort()).toEqual([config.listen.port, config.admin.port].sort())
      expect(one(manifests, 'ServiceAccount', deployment.spec.template.spec.serviceAccountName)).toBeDefined()
    })

    it('reads the Kubernetes API only when it discovers through it, and may then list and watch EndpointSlices', () => {
      const { manifests, deployment, raw } = r()
      const pod = deployment.spec.template.spec
      const sources = ((raw.endpoints ?? []) as { discovery?: { type: string; namespace?: string }[] }[]).flatMap((e) => e.discovery ?? [])
      const k8s = sources.filter((s) => s.type === 'kubernetes')
      const sa = one(manifests, 'ServiceAccount', pod.serviceAccountName)
      const mounted = pod.automountServiceAccountToken ?? sa.automountServiceAccountToken ?? true
      expect(mounted).toBe(k8s.length > 0)
      const bindings = manifests.filter(
        (m) => m.kind === 'RoleBinding' && (m.subjects as { kind: string; name: string; namespace?: string }[]).some((s) => s.kind === 'ServiceAccount' && s.name === sa.metadata.name && s.namespace === deployment.metadata.namespace),
      )
      if (k8s.length === 0) {
        expect(bindings).toEqual([])
        return
      }
      const ns = deployment.metadata.namespace
      expect(ns, 'the overlay sets a namespace').toBeTypeOf('string')
      for (const s of k8s) expect(s.namespace ?? ns, 'the source reads the namespace its Role covers').toBe(ns)
      const granted = (group: string, resource: string) =>
        bindings.some((b) => {
          const role = manifests.find((m) => m.kind === b.roleRef.kind && m.metadata.name === b.roleRef.name)
          if (role === undefined || (role.kind === 'Role' && role.metadata.namespace !== ns)) return false
          return (role.rules as { apiGroups: string[]; resources: string[]; verbs: string[] }[]).some(
            (rule) => rule.apiGroups.includes(group) && rule.resources.includes(resource) && ['get', 'list', 'watch'].every((v) => rule.verbs.includes(v)),
          )
        })
      expect(granted('discovery.k8s.io', 'endpointslices'), 'a Role bound to the service account grants get/list/watch on discovery.k8s.io endpointslices').toBe(true)
      // The sources read the pods' role labels unless told not to (roleLabel: false).
      const readsPods = parseConfig(raw).endpoints.some((e) => (e.discovery ?? []).some((s) => s.type === 'kubernetes' && s.roleLabel !== false))
      expect(granted('', 'pods'), 'get/list/watch on pods, for their role labels').toBe(readsPods)
    })
  })
})

describe('deploy/kubernetes/overlays/gateway-api, the endpoint picker', () => {
  const r = () => rendered.get(EPP_OVERLAY)!
  const byKind = (kind: string) => r().manifests.filter((m) => m.kind === kind)
  const grpcPort = 9002 // epp's default: the overlay sets no --grpc-port
  const healthPort = 9003 // epp's plaintext health port with TLS on (its default): no --grpc-health-port, no --grpc-tls off

  it("its ConfigMap's configuration is valid for the program and finds the pool through the API server", () => {
    const config = parseConfig(r().raw, `deploy/kubernetes/overlays/${EPP_OVERLAY}`)
    const sources = config.endpoints.flatMap((e) => e.discovery ?? [])
    expect(sources.map((s) => s.type)).toEqual(['inferencePool'])
    const pool = one(r().manifests, 'InferencePool')
    expect(sources[0]).toMatchObject({ name: pool.metadata.name, namespace: r().deployment.metadata.namespace })
  })

  it('runs epp with flags it accepts, and only variables it knows', () => {
    const args: string[] = r().container.args
    expect(args[0]).toBe('epp')
    const ok = cli([...args, '--help'])
    expect(ok.status, `epp ${args.join(' ')}: ${ok.stderr}`).toBe(0)
    expect(cli(['epp', '--no-such-flag-for-this-test', '--help']).status, 'epp --help must still refuse an unknown flag').not.toBe(0)
    for (const e of (r().container.env ?? []) as { name: string }[]) expect(env.has(e.name), `${e.name} is a variable the program reads`).toBe(true)
  })

  it('probes its gRPC health on the plaintext health port (the kubelet has no TLS), for the services a running picker answers there', async () => {
    const { container } = r()
    const args: string[] = container.args
    expect(args, 'TLS on, the default: the probes go to the plaintext health port').not.toContain('--grpc-tls')
    expect(args).not.toContain('--grpc-health-port')
    const ports = new Map((container.ports as { name: string; containerPort: number }[]).map((p) => [p.name, p.containerPort]))
    expect(ports.get('grpc')).toBe(grpcPort)
    expect(ports.get('health')).toBe(healthPort)
    expect(ports.get('metrics')).toBe(settled(r().raw).admin.port)
    const { EppServer } = await import('../../src/epp/server.js')
    const { selfSignedPair } = await import('../../src/epp/tls.js')
    const { TestGateway } = await import('../epp/gateway.js')
    const epp = await EppServer.start(onLoopback(r().raw, fleet.urls[0]!), { grpcHost: '127.0.0.1', grpcPort: 0, bodyMode: 'streamed', tls: await selfSignedPair(), healthPort: 0 })
    // The kubelet's probe: plaintext gRPC to the health port.
    const gw = new TestGateway(epp.healthAddress!, 'streamed')
    try {
      for (const probe of ['readinessProbe', 'livenessProbe'] as const) {
        const g = container[probe]?.grpc as { port: number; service?: string } | undefined
        expect(g?.port, probe).toBe(healthPort)
        expect(await gw.health(g!.service ?? ''), `${probe}: ${g!.service}`).toBe('SERVING')
      }
    } finally {
      gw.close()
      await epp.close()
    }
  })

  it('gives the drain its time, reads the API with its token, and may read only pools and pods', () => {
    const { deployment, manifests, raw } = r()
    const { delayMs, timeoutMs } = settled(raw).drain
    const pod = deployment.spec.template.spec
    expect(pod.terminationGracePeriodSeconds * 1000).toBeGreaterThanOrEqual(delayMs + timeoutMs + 5000)
    expect(pod.automountServiceAccountToken ?? one(manifests, 'ServiceAccount', pod.serviceAccountName).automountServiceAccountToken ?? true).toBe(true)
    const rules = byKind('Role').flatMap((role) => role.rules as { apiGroups: string[]; resources: string[]; verbs: string[] }[])
    const grants = (group: string, resource: string) => rules.some((x) => x.apiGroups.includes(group) && x.resources.includes(resource) && ['get', 'list', 'watch'].every((v) => x.verbs.includes(v)))
    expect(grants('inference.networking.k8s.io', 'inferencepools')).toBe(true)
    expect(grants('', 'pods')).toBe(true)
    expect(rules.every((x) => x.verbs.every((v) => ['get', 'list', 'watch'].includes(v))), 'read-only').toBe(true)
    const binding = one(manifests, 'RoleBinding')
    expect(binding.subjects).toContainEqual(expect.objectContaining({ kind: 'ServiceAccount', name: pod.serviceAccountName, namespace: deployment.metadata.namespace }))
  })

  it('has an InferencePool whose endpointPickerRef names its gRPC Service (appProtocol http2), and an HTTPRoute to the pool', () => {
    const pool = one(r().manifests, 'InferencePool')
    expect(pool.apiVersion).toBe('inference.networking.k8s.io/v1')
    const ref = pool.spec.endpointPickerRef as { name: string; port: { number: number }; failureMode?: string }
    expect(['FailOpen', 'FailClose']).toContain(ref.failureMode)
    const svc = one(r().manifests, 'Service', ref.name)
    const port = (svc.spec.ports as { port: number; targetPort: string | number; appProtocol?: string }[]).find((p) => p.port === ref.port.number)!
    expect(port.appProtocol).toBe('http2')
    expect(port.targetPort === 'grpc' || port.targetPort === grpcPort).toBe(true)
    const labels = r().deployment.spec.template.metadata.labels as Record<string, string>
    expect(Object.entries(svc.spec.selector as Record<string, string>).every(([k, v]) => labels[k] === v), 'the Service selects the picker').toBe(true)
    const route = one(r().manifests, 'HTTPRoute')
    expect(route.spec.rules.flatMap((x: { backendRefs: unknown[] }) => x.backendRefs)).toContainEqual(expect.objectContaining({ group: 'inference.networking.k8s.io', kind: 'InferencePool', name: pool.metadata.name }))
  })
})

describe('deploy/kubernetes/vllm, the example fleet', () => {
  const fleetManifests = (() => {
    const r = spawnSync(kubectl(), ['kustomize', join(deploy, 'kubernetes', 'vllm')], { encoding: 'utf8', timeout: 60_000 })
    if (r.status !== 0) throw new Error(`kubectl kustomize vllm failed: ${r.stderr}`)
    return parseAllDocuments(r.stdout)
      .map((d) => d.toJS() as Manifest | null)
      .filter((d): d is Manifest => d !== null)
  })()
  const sts = one(fleetManifests, 'StatefulSet', 'vllm')
  const vllm = sts.spec.template.spec.containers[0]
  const args: string[] = vllm.args
  const flag = (name: string) => args.find((a) => a === name || a.startsWith(`${name}=`))
  const ports = new Map((vllm.ports as { name: string; containerPort: number }[]).map((p) => [p.name, p.containerPort]))

  it('runs vLLM with prefix caching and a ZeroMQ KV-event publisher with its replay socket', () => {
    expect(flag('--enable-prefix-caching')).toBeDefined()
    const raw = flag('--kv-events-config')!
    const events = JSON.parse(raw.slice(raw.indexOf('=') + 1)) as Record<string, unknown>
    expect(events).toMatchObject({ enable_kv_cache_events: true, publisher: 'zmq' })
    expect(events.endpoint).toBe(`tcp://*:${ports.get('kv-events')}`)
    expect(events.replay_endpoint).toBe(`tcp://*:${ports.get('kv-replay')}`)
    // No block size given: vLLM's default, the router's default exactBlockSize.
    expect(flag('--block-size')).toBeUndefined()
    expect(ConfigSchema.parse({ endpoints: [{ name: 'x', instances: ['http://a:1'] }] }).routing.exactBlockSize).toBe(16)
  })

  it.each(overlayNames.filter((o) => o !== PD_OVERLAY))("is what the %s overlay's configuration reads: its publishers' ports, its API port and the Services it names", (overlay) => {
    const raw = rendered.get(overlay)!.raw
    const config = settled(raw)
    expect(config.kvEvents, 'the overlay follows the KV events').toBeDefined()
    expect(config.kvEvents!.port).toEqual({ port: ports.get('kv-events') })
    expect(config.kvEvents!.replayPort).toEqual({ port: ports.get('kv-replay') })
    expect(config.tokenizer?.mode).toBe('remote')
    const api = ports.get('http')!
    const text = JSON.stringify(raw.endpoints)
    const services = new Map(fleetManifests.filter((m) => m.kind === 'Service').map((m) => [m.metadata.name, m]))
    const namespace = one(fleetManifests, 'StatefulSet').metadata.namespace
    if (overlay === EPP_OVERLAY) {
      // The pool selects the example's pods, on its API port.
      const pool = one(rendered.get(overlay)!.manifests, 'InferencePool')
      const podLabels = sts.spec.template.metadata.labels as Record<string, string>
      expect(Object.entries(pool.spec.selector.matchLabels as Record<string, string>).every(([k, v]) => podLabels[k] === v)).toBe(true)
      expect(pool.spec.targetPorts).toEqual([{ number: api }])
      expect(pool.metadata.namespace).toBe(namespace)
    } else if (overlay === 'kubernetes') {
      const src = (raw.endpoints[0].discovery as { service: string; namespace: string }[])[0]!
      expect(services.has(src.service)).toBe(true)
      expect(src.namespace).toBe(namespace)
      // The router takes an EndpointSlice's first port: the API's.
      expect(services.get(src.service)!.spec.ports[0].port).toBe(api)
    } else {
      expect(text).toContain(`${sts.spec.serviceName}.${namespace}.svc.cluster.local:${api}`)
      expect(services.get(sts.spec.serviceName)!.spec.clusterIP).toBe('None')
    }
  })
})

describe('deploy/kubernetes/overlays/pd-nixl, prefill and decode pods with NixlConnector', () => {
  const r = () => rendered.get(PD_OVERLAY)!
  const fleetOf = (role: 'prefill' | 'decode') => {
    const found = r().manifests.filter((m) => m.kind === 'Deployment' && m.spec.template.metadata.labels?.['llm-d.ai/role'] === role)
    expect(found, `one Deployment of ${role} pods`).toHaveLength(1)
    const d = found[0]!
    const vllm = d.spec.template.spec.containers[0]
    const args: string[] = vllm.args
    const flag = (name: string) => {
      const a = args.find((x) => x === name || x.startsWith(`${name}=`))
      return a === undefined ? undefined : a === name ? args[args.indexOf(a) + 1] : a.slice(name.length + 1)
    }
    const ports = new Map((vllm.ports as { name: string; containerPort: number }[]).map((p) => [p.name, p.containerPort]))
    const env = new Map((vllm.env as { name: string; value?: string; valueFrom?: { fieldRef?: { fieldPath: string } } }[]).map((e) => [e.name, e]))
    return { d, vllm, flag, ports, env, labels: d.spec.template.metadata.labels as Record<string, string> }
  }

  it.each(['prefill', 'decode'] as const)('runs %s pods labelled llm-d.ai/role, with NixlConnector and the side channel on the pod IP', (role) => {
    const f = fleetOf(role)
    expect(f.d.spec.selector.matchLabels['llm-d.ai/role']).toBe(role)
    expect(JSON.parse(f.flag('--kv-transfer-config')!)).toEqual({ kv_connector: 'NixlConnector', kv_role: 'kv_both' })
    expect(f.flag('--enable-prefix-caching')).toBeDefined()
    expect(f.env.get('VLLM_NIXL_SIDE_CHANNEL_HOST')?.valueFrom?.fieldRef?.fieldPath).toBe('status.podIP')
    expect(f.ports.get('nixl')).toBe(Number(f.env.get('VLLM_NIXL_SIDE_CHANNEL_PORT')?.value ?? 5600))
    const events = JSON.parse(f.flag('--kv-events-config')!) as Record<string, unknown>
    const config = settled(r().raw)
    // The router reads each pod's events on its own address, at the ports the pods publish on.
    expect(config.kvEvents!.port).toEqual({ port: f.ports.get('kv-events') })
    expect(config.kvEvents!.replayPort).toEqual({ port: f.ports.get('kv-replay') })
    expect(events.endpoint).toBe(`tcp://*:${f.ports.get('kv-events')}`)
    expect(events.replay_endpoint).toBe(`tcp://*:${f.ports.get('kv-replay')}`)
  })

  it("configures the router with a DNS source per role, each a headless Service selecting that role's pods only, on their API port, and the nixl connector", () => {
    const config = parseConfig(r().raw, `deploy/kubernetes/overlays/${PD_OVERLAY}`)
    expect(config.disaggregation.connector).toBe('nixl')
    // Under vLLM's default lease of the blocks on the prefill pod (kv_lease_duration, 30 s).
    expect(config.disaggregation.kvHoldMs).toBeLessThan(30_000)
    const sources = config.endpoints[0]!.discovery ?? []
    expect(sources.map((s) => s.role).sort()).toEqual(['decode', 'prefill'])
    const namespace = r().deployment.metadata.namespace
    for (const s of sources) {
      expect(s.type).toBe('dns')
      if (s.type !== 'dns') continue
      const u = new URL(s.url)
      const [svcName, ns, ...rest] = u.hostname.split('.')
      expect([ns, rest.join('.')]).toEqual([namespace, 'svc.cluster.local'])
      const svc = one(r().manifests, 'Service', svcName)
      expect(svc.spec.clusterIP, `${svcName} is headless: its name resolves to each pod`).toBe('None')
      const selects = (l: Record<string, string>) => Object.entries(svc.spec.selector as Record<string, string>).every(([k, v]) => l[k] === v)
      const mine = fleetOf(s.role as 'prefill' | 'decode')
      const other = fleetOf(s.role === 'prefill' ? 'decode' : 'prefill')
      expect(selects(mine.labels), `${svcName} selects the ${s.role} pods`).toBe(true)
      expect(selects(other.labels), `${svcName} does not select the other role's pods`).toBe(false)
      expect(Number(u.port)).toBe(mine.ports.get('http'))
    }
  })
})

describe('deploy/Dockerfile', () => {
  it('copies only what the repository holds and the ignore file lets through', () => {
    const patterns = readFileSync(join(deploy, 'Dockerfile.dockerignore'), 'utf8')
      .split('\n')
      .map((l) => l.trim())
      .filter((l) => l !== '' && !l.startsWith('#'))
    const stages = dockerfile.filter((i) => i.op === 'FROM').map((i) => /\bAS\s+(\S+)/i.exec(i.rest)?.[1])
    const copies = dockerfile.filter((i) => i.op === 'COPY' || i.op === 'ADD')
    expect(copies.length).toBeGreaterThan(0)
    for (const c of copies) {
      const { flags, sources } = copyParts(c.rest)
      if (flags.from !== undefined) {
        expect(stages, `COPY --from=${flags.from} names a stage`).toContain(flags.from)
        continue
      }
      for (const s of sources) {
        expect(existsSync(join(root, s)), `COPY ${s}: in the repository`).toBe(true)
        expect(ignored(patterns, s), `COPY ${s}: not kept out by Dockerfile.dockerignore`).toBe(false)
      }
    }
  })

  it('builds on glibc Node 20 in both stages, and the runtime stage installs tini', () => {
    const froms = dockerfile.filter((i) => i.op === 'FROM').map((i) => i.rest.split(/\s+/)[0]!)
    expect(froms.length).toBeGreaterThanOrEqual(2)
    for (const f of froms) expect(f).toMatch(/^node:20-(bookworm|bullseye)(-slim)?$/)
    expect(inFinal('RUN').some((i) => /apt-get install\b.*\btini\b/.test(i.rest))).toBe(true)
  })

  it("runs node with the bin's V8 flags on the bin's script, under tini, and serve accepts its arguments", () => {
    const shebang = readFileSync(join(root, 'src/cli.ts'), 'utf8').split('\n')[0]!
    const m = /^#!\/usr\/bin\/env -S node(.*)$/.exec(shebang)
    expect(m, 'src/cli.ts starts with an env -S node shebang').not.toBeNull()
    const shebangFlags = m![1]!.trim().split(/\s+/).filter(Boolean)
    const entry = instructionArgs(inFinal('ENTRYPOINT').at(-1)!.rest)
    const cmd = instructionArgs(inFinal('CMD').at(-1)!.rest)
    expect(entry.exec && cmd.exec, 'exec form: no shell between tini and node').toBe(true)
    const [tini, dashdash, node, ...rest] = entry.args
    expect([tini, dashdash, node]).toEqual(['/usr/bin/tini', '--', 'node'])
    const script = rest.find((a) => !a.startsWith('-'))!
    expect(rest.slice(0, rest.indexOf(script))).toEqual(shebangFlags)
    const pkg = JSON.parse(readFileSync(join(root, 'package.json'), 'utf8')) as { bin: Record<string, string> }
    expect(Object.values(pkg.bin).map((b) => b.replace(/^\.\//, ''))).toContain(script)
    // tsconfig.build.json compiles src/ into dist/: the script is src/cli.ts built.
    const build = JSON.parse(readFileSync(join(root, 'tsconfig.build.json'), 'utf8')) as { compilerOptions: { rootDir: string; outDir: string } }
    expect(script).toBe(`${build.compilerOptions.outDir}/cli.js`)
    expect(existsSync(join(root, build.compilerOptions.rootDir, 'cli.ts'))).toBe(true)
    const workdir = inFinal('WORKDIR').at(-1)!.rest
    const dests = inFinal('COPY').map((c) => copyParts(c.rest).dest.replace(/\/$/, ''))
    expect(dests, `the final stage copies ${script.split('/')[0]}/ into ${workdir}`).toContain(script.split('/')[0])
    const args = [...rest.slice(rest.indexOf(script) + 1), ...cmd.args]
    expect(args[0]).toBe('serve')
    const r = cli([...args, '--help'], {}, shebangFlags)
    expect(r.status, `node ${shebangFlags.join(' ')} ${script} ${args.join(' ')} --help: ${r.stderr}`).toBe(0)
  })

  it("sets only variables serve knows, opens the admin port, and exposes the program's default ports", () => {
    const names = dockerfile.filter((i) => i.op === 'ENV').flatMap((i) => envNames(i.rest))
    for (const n of names) expect(env.has(n), `ENV ${n} is a variable serve reads`).toBe(true)
    expect(dockerfileText).toMatch(/PREFIX_ROUTER_ADMIN_HOST=0\.0\.0\.0/)
    const defaults = parseConfig({})
    const exposed = inFinal('EXPOSE').flatMap((i) => i.rest.split(/\s+/).map((p) => Number(p.split('/')[0])))
    expect(exposed.sort()).toEqual([defaults.listen.port, defaults.admin.port].sort())
    const user = inFinal('USER').at(-1)?.rest.split(':')[0]
    expect(user, 'a numeric non-root USER').toMatch(/^[1-9]\d*$/)
  })

  it("HEALTHCHECK passes against a running router's /ping and fails where none listens", async () => {
    const hc = inFinal('HEALTHCHECK').at(-1)!.rest
    const m = /\bCMD\s+(\[.*\])\s*$/.exec(hc)
    expect(m, 'HEALTHCHECK CMD in exec form').not.toBeNull()
    const [bin, ...args] = JSON.parse(m![1]!) as string[]
    expect(bin).toBe('node')
    expect(hc).toContain(`|| ${parseConfig({}).listen.port})`)
    // Asynchronously: the router answering it runs in this process.
    const run = (port: number) =>
      new Promise<number | null>((resolve) => {
        const child = spawn(process.execPath, args, { env: { ...process.env, PREFIX_ROUTER_PORT: String(port) }, stdio: 'ignore', timeout: 20_000 })
        child.once('exit', (code) => resolve(code))
      })
    expect(await run(Number(new URL(proxy.url).port))).toBe(0)
    const free = spawnSync(process.execPath, ['-e', "const s=require('net').createServer().listen(0,'127.0.0.1',()=>{console.log(s.address().port);s.close()})"], { encoding: 'utf8' })
    expect(await run(Number(free.stdout.trim()))).not.toBe(0)
  })
})

describe('deploy/grafana/prefix-router.json', () => {
  const dash = JSON.parse(readFileSync(join(deploy, 'grafana/prefix-router.json'), 'utf8')) as {
    panels: { type: string; title: string; datasource?: { uid: string }; targets?: { expr: string; datasource?: { uid: string } }[] }[]
    templating: { list: { name: string; type: string; query: unknown; definition?: string }[] }
  }
  const panels = dash.panels.filter((p) => p.type !== 'row')
  const exprs = [
    ...panels.flatMap((p) => (p.targets ?? []).map((t) => t.expr)),
    ...dash.templating.list.filter((v) => v.type === 'query').map((v) => (typeof v.query === 'string' ? v.query : ((v.query as { query: string }).query ?? v.definition!))),
  ]
  const used = [...new Set(exprs.flatMap((e) => promqlMetricNames(e.replace(/^label_values\(([^,)]+).*$/, '$1'))))]

  it('queries only metrics the router exposes on its admin port', async () => {
    const chat = await fetch(`${proxy.url}/v1/chat/completions`, {
      method: 'POST',
      headers: { 'content-type': 'application/json' },
      body: JSON.stringify({ model: 'sim-tiny', messages: [{ role: 'user', content: 'a request, so that every histogram has a sample' }], max_tokens: 2 }),
    })
    expect(chat.status).toBe(200)
    await chat.text()
    const metrics = exposedMetrics(await (await fetch(`${proxy.adminUrl}/metrics`)).text())
    expect(metrics.size).toBeGreaterThan(10)
    const missing = used.filter((n) => !isExposed(metrics, n))
    expect(missing, `dashboard metrics absent from /metrics (it has: ${[...metrics.keys()].filter((k) => k.startsWith('prefix_router_')).join(', ')})`).toEqual([])
  })

  it('shows requests, TTFB, decision time, overflow, in flight, KV-cache hits, rotation, retries, ejections and connections', () => {
    const bases = new Set(used.map((n) => n.replace(/_(bucket|sum|count)$/, '')))
    for (const m of [
      'prefix_router_requests_total',
      'prefix_router_upstream_ttfb_seconds',
      'prefix_router_routing_decision_seconds',
      'prefix_router_overflow_total',
      'prefix_router_in_flight',
      'prefix_router_instance_kv_cache_hit_ratio',
      'prefix_router_instance_healthy',
      'prefix_router_instance_ejected',
      'prefix_router_retries_total',
      'prefix_router_ejections_total',
      'prefix_router_front_connections',
    ])
      expect(bases.has(m), m).toBe(true)
    expect(exprs.filter((e) => e.includes('histogram_quantile')).every((e) => /_bucket\b/.test(e))).toBe(true)
  })

  it('takes its Prometheus data source from a template variable', () => {
    const v = dash.templating.list.find((x) => x.type === 'datasource')
    expect(v?.query).toBe('prometheus')
    const ref = `\${${v!.name}}`
    for (const p of panels) {
      expect(p.datasource?.uid, p.title).toBe(ref)
      for (const t of p.targets ?? []) expect(t.datasource?.uid ?? ref, p.title).toBe(ref)
    }
  })
})
