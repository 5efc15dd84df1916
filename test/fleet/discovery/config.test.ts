// The `discovery` key of an endpoint: what it accepts, its defaults, and errors that name
// the bad key and what it was given.
import { describe, expect, it } from 'vitest'
import { parseConfig } from '../../../src/config/config.js'
import { mkdtempSync, rmSync, writeFileSync } from 'node:fs'
import { tmpdir } from 'node:os'
import { join } from 'node:path'
import type { V1Pod } from '@kubernetes/client-node'
import { poolInstances, poolNamespace, poolSelector, type InferencePool } from '../../../src/fleet/discovery/inference-pool.js'
import { instancesOf, selectorOf } from '../../../src/fleet/discovery/kubernetes.js'

const parse = (discovery: unknown, instances?: unknown) => parseConfig({ endpoints: [{ name: 'a', ...(instances !== undefined && { instances }), discovery }] })
const messageOf = (f: () => unknown) => {
  try {
    f()
  } catch (err) {
    return (err as Error).message
  }
  throw new Error('no error')
}

describe('discovery configuration', () => {
  it('an endpoint may have discovery sources instead of instances, with defaults filled in', () => {
    const c = parse([
      { type: 'dns', url: 'http://vllm:8000' },
      { type: 'file', path: 'fleet.yaml' },
      { type: 'kubernetes', service: 'vllm' },
      { type: 'inferencePool', name: 'vllm-llama3' },
      { type: 'inferencePool', name: 'vllm.gpu', namespace: 'inference', scheme: 'https' },
    ])
    expect(c.endpoints[0]!.instances).toEqual([])
    expect(c.endpoints[0]!.discovery).toEqual([
      { type: 'dns', url: 'http://vllm:8000', intervalMs: 5000, srv: false },
      { type: 'file', path: 'fleet.yaml' },
      { type: 'kubernetes', service: 'vllm', scheme: 'http', roleLabel: 'llm-d.ai/role' },
      { type: 'inferencePool', name: 'vllm-llama3', scheme: 'http', roleLabel: 'llm-d.ai/role' },
      { type: 'inferencePool', name: 'vllm.gpu', namespace: 'inference', scheme: 'https', roleLabel: 'llm-d.ai/role' },
    ])
  })

  it('every source type takes a role for its instances; the Kubernetes ones a role label, or false to read none', () => {
    const c = parse([
      { type: 'dns', url: 'http://prefill:8000', role: 'prefill' },
      { type: 'file', path: 'decode.yaml', role: 'decode' },
      { type: 'kubernetes', service: 'vllm', role: 'decode', roleLabel: 'example.com/stage' },
      { type: 'inferencePool', name: 'vllm', role: 'both', roleLabel: false },
    ])
    expect(c.endpoints[0]!.discovery!.map((s) => [s.type, s.role, 'roleLabel' in s ? s.roleLabel : undefined])).toEqual([
      ['dns', 'prefill', undefined],
      ['file', 'decode', undefined],
      ['kubernetes', 'decode', 'example.com/stage'],
      ['inferencePool', 'both', false],
    ])
  })

  it.each([
    [[], /endpoints\[0\]\.instances: must list at least one instance, or discovery sources/],
    [[{ type: 'dns', url: 'vllm:8000' }], /discovery\[0\]\.url: must be an http:\/\/ or https:\/\/ URL naming the host to resolve .*; got "vllm:8000"/],
    [[{ type: 'dns', url: 'http://vllm:8000', server: 'dns.local:53' }], /discovery\[0\]\.server: must be IP:PORT .*; got "dns\.local:53"/],
    [[{ type: 'dns', url: 'http://vllm:8000', intervalMs: 5 }], /discovery\[0\]\.intervalMs: Too small: expected number to be >=100; got 5/],
    [[{ type: 'kubernetes', namespace: 'x' }], /discovery\[0\]\.service: give service \(a Service's name\) or labelSelector/],
    [[{ type: 'kubernetes', service: 'vllm', port: 0 }], /discovery\[0\]\.port/],
    [[{ type: 'consul' }], /discovery\[0\]\.type: .*'file' \| 'dns' \| 'kubernetes' \| 'inferencePool'; got "consul"/],
    [[{ type: 'inferencePool' }], /discovery\[0\]\.name/],
    [[{ type: 'inferencePool', name: 'VLLM' }], /discovery\[0\]\.name: must be an object name .*; got "VLLM"/],
    [[{ type: 'inferencePool', name: 'vllm', namespace: 'a.b' }], /discovery\[0\]\.namespace: must be a namespace name/],
    [[{ type: 'inferencePool', name: 'vllm', scheme: 'grpc' }], /discovery\[0\]\.scheme/],
    [[{ type: 'inferencePool', name: 'vllm', selector: 'app=vllm' }], /discovery\[0\]: unknown key 'selector'/],
    [[{ type: 'file', path: 'f.yaml', watch: true }], /discovery\[0\]: unknown key 'watch'/],
    [[{ type: 'dns', url: 'http://vllm:8000', role: 'prefiller' }], /discovery\[0\]\.role: .*"prefill"\|"decode"\|"both"; got "prefiller"/],
    [[{ type: 'kubernetes', service: 'vllm', roleLabel: 'llm-d.ai/role=prefill' }], /discovery\[0\]\.roleLabel: .*label key/],
    [[{ type: 'inferencePool', name: 'vllm', roleLabel: true }], /discovery\[0\]\.roleLabel/],
    [[{ type: 'file', path: 'f.yaml', roleLabel: 'llm-d.ai/role' }], /discovery\[0\]: unknown key 'roleLabel'/],
  ])('%j is refused', (discovery, message) => {
    expect(messageOf(() => parse(discovery))).toMatch(message)
  })
})

describe('EndpointSlices to instances', () => {
  const slice = (endpoints: unknown[], ports: unknown[] = [{ name: 'http', port: 8000 }]) => ({ metadata: { name: 's' }, addressType: 'IPv4', ports, endpoints }) as never
  it('ready addresses only, on the chosen port, IPv6 in brackets', () => {
    const cfg = { type: 'kubernetes', service: 'vllm', scheme: 'http', roleLabel: 'llm-d.ai/role' } as const
    const list = instancesOf([slice([{ addresses: ['10.0.0.1'] }, { addresses: ['10.0.0.2'], conditions: { ready: false } }, { addresses: ['fd00::3'], conditions: { ready: true } }])], cfg)
    expect(list.map((i) => i.url)).toEqual(['http://10.0.0.1:8000', 'http://[fd00::3]:8000'])
    const named = instancesOf([slice([{ addresses: ['10.0.0.1'] }], [{ name: 'metrics', port: 9000 }, { name: 'http', port: 8000 }])], { ...cfg, port: 'http' })
    expect(named.map((i) => i.url)).toEqual(['http://10.0.0.1:8000'])
    // A slice without the named port has no instance to offer.
    expect(instancesOf([slice([{ addresses: ['10.0.0.1'] }])], { ...cfg, port: 'grpc' })).toEqual([])
    expect(instancesOf([slice([{ addresses: ['10.0.0.1'] }])], { ...cfg, port: 7000, scheme: 'https' }).map((i) => i.url)).toEqual(['https://10.0.0.1:7000'])
  })

  it("the Service's label and a given selector together", () => {
    const k = { type: 'kubernetes', scheme: 'http', roleLabel: false } as const
    expect(selectorOf({ ...k, service: 'vllm' })).toBe('kubernetes.io/service-name=vllm')
    expect(selectorOf({ ...k, service: 'vllm', labelSelector: 'tier=gpu' })).toBe('kubernetes.io/service-name=vllm,tier=gpu')
    expect(selectorOf({ ...k, labelSelector: 'app=vllm' })).toBe('app=vllm')
  })

  it("each endpoint's role from the label of the pod it targets (llm-d's values), else the source's", () => {
    const cfg = { type: 'kubernetes', service: 'vllm', scheme: 'http', roleLabel: 'llm-d.ai/role', role: 'decode' } as const
    const at = (n: number, pod?: string) => ({ addresses: [`10.0.0.${n}`], ...(pod !== undefined && { targetRef: { kind: 'Pod', name: pod, namespace: 'inference' } }) })
    const labels = new Map<string, Record<string, string>>([
      ['p', { 'llm-d.ai/role': 'prefill' }],
      ['d', { 'llm-d.ai/role': 'decode' }],
      ['pd', { 'llm-d.ai/role': 'prefill-decode' }],
      ['old', { 'llm-d.ai/role': 'both' }],
      ['ep', { 'llm-d.ai/role': 'encode-prefill' }],
      ['ed', { 'llm-d.ai/role': 'encode-decode' }],
      ['epd', { 'llm-d.ai/role': 'encode-prefill-decode' }],
      ['e', { 'llm-d.ai/role': 'encode' }],
      ['typo', { 'llm-d.ai/role': 'prefiller' }],
    ])
    const pods = { labels, unknown: [] as { pod: string; value: string }[] }
    const names = ['p', 'd', 'pd', 'old', 'ep', 'ed', 'epd', 'e', 'typo', 'unlabelled']
    const list = instancesOf([slice([...names.map((p, i) => at(i + 1, p)), at(20)])], cfg, pods)
    const role = Object.fromEntries(list.map((i) => [i.url.slice('http://10.0.0.'.length, -':8000'.length), i.role]))
    expect(role).toEqual({ '1': 'prefill', '2': 'decode', '3': 'both', '4': 'both', '5': 'prefill', '6': 'decode', '7': 'both', '9': 'decode', '10': 'decode', '20': 'decode' })
    // The encode-only pod (8) is no instance; the value of no known role is named.
    expect(pods.unknown).toEqual([{ pod: 'typo', value: 'prefiller' }])
    // Without the pods read (roleLabel: false), every endpoint takes the source's role.
    expect(new Set(instancesOf([slice(names.map((p, i) => at(i + 1, p)))], { ...cfg, roleLabel: false }, pods).map((i) => i.role))).toEqual(new Set(['decode']))
    expect(new Set(instancesOf([slice([at(1, 'p')])], { ...cfg, role: undefined }).map((i) => i.role))).toEqual(new Set(['both']))
  })
})

describe('an InferencePool and its pods to instances', () => {
  const pool = (matchLabels: Record<string, string>, ports: number[]): InferencePool => ({ metadata: { name: 'p' }, spec: { selector: { matchLabels }, targetPorts: ports.map((number) => ({ number })) } })
  const pod = (ip: string | undefined, o: { labels?: Record<string, string>; phase?: string; ready?: string; deleting?: boolean } = {}): V1Pod => ({
    metadata: { name: `pod-${ip}`, labels: o.labels ?? { app: 'vllm' }, ...(o.deleting && { deletionTimestamp: new Date() }) },
    status: { phase: o.phase ?? 'Running', ...(ip !== undefined && { podIP: ip }), conditions: o.ready === undefined ? [{ type: 'Ready', status: 'True' }] : o.ready === '' ? [] : [{ type: 'Ready', status: o.ready }] },
  })

  it('Running, Ready and not terminating pods with an IP that the selector matches, on every target port, IPv6 in brackets', () => {
    const pods = [
      pod('10.0.0.1'),
      pod('fd00::2'),
      pod('10.0.0.3', { ready: 'False' }),
      pod('10.0.0.4', { ready: '' }), // no Ready condition: not ready
      pod('10.0.0.5', { phase: 'Pending' }),
      pod('10.0.0.6', { deleting: true }),
      pod(undefined),
      pod('10.0.0.7', { labels: { app: 'other' } }),
    ]
    expect(poolInstances(pool({ app: 'vllm' }, [8000, 8001, 8000]), pods, 'http').map((i) => i.url)).toEqual([
      'http://10.0.0.1:8000',
      'http://10.0.0.1:8001',
      'http://[fd00::2]:8000',
      'http://[fd00::2]:8001',
    ])
    expect(poolInstances(pool({ app: 'vllm' }, [8000]), pods, 'https').map((i) => i.url)).toEqual(['https://10.0.0.1:8000', 'https://[fd00::2]:8000'])
    // No target port, or a selector of nothing: no instance.
    expect(poolInstances(pool({ app: 'vllm' }, []), pods, 'http')).toEqual([])
    expect(poolInstances(pool({}, [8000]), pods, 'http')).toEqual([])
  })

  it("each pod's role from its label (configurable), else the source's; an encode-only pod is no instance", () => {
    const p = pool({ app: 'vllm' }, [8000])
    const labelled = (ip: string, role: string, key = 'llm-d.ai/role') => pod(ip, { labels: { app: 'vllm', [key]: role } })
    const pods = [labelled('10.0.0.1', 'prefill'), labelled('10.0.0.2', 'decode'), labelled('10.0.0.3', 'encode'), labelled('10.0.0.4', 'prefil'), pod('10.0.0.5'), labelled('10.0.0.6', 'prefill', 'stage')]
    const unknown: { pod: string; value: string }[] = []
    const roles = (l: ReturnType<typeof poolInstances>) => l.map((i) => `${i.url} ${i.role}`)
    expect(roles(poolInstances(p, pods, 'http', { roleLabel: 'llm-d.ai/role', role: 'decode', unknown }))).toEqual([
      'http://10.0.0.1:8000 prefill',
      'http://10.0.0.2:8000 decode',
      'http://10.0.0.4:8000 decode',
      'http://10.0.0.5:8000 decode',
      'http://10.0.0.6:8000 decode',
    ])
    expect(unknown).toEqual([{ pod: 'pod-10.0.0.4', value: 'prefil' }])
    expect(roles(poolInstances(p, pods, 'http', { roleLabel: 'stage' })).filter((r) => !r.endsWith(' both'))).toEqual(['http://10.0.0.6:8000 prefill'])
    expect(new Set(poolInstances(p, pods, 'http').map((i) => i.role))).toEqual(new Set(['both']))
  })

  it("the selector as the API takes it, keys sorted; none when it has no label", () => {
    expect(poolSelector(pool({ tier: 'gpu', 'app.kubernetes.io/name': 'vllm' }, [8000]))).toBe('app.kubernetes.io/name=vllm,tier=gpu')
    expect(poolSelector(pool({}, [8000]))).toBeUndefined()
    expect(poolSelector({ metadata: { name: 'p' } })).toBeUndefined()
  })

  it("the namespace: the configured one, else the service account's, else an error", () => {
    const dir = mkdtempSync(join(tmpdir(), 'pr-sa-'))
    try {
      const src = { type: 'inferencePool', name: 'p', scheme: 'http', roleLabel: 'llm-d.ai/role' } as const
      expect(poolNamespace({ ...src, namespace: 'given' }, dir)).toBe('given')
      expect(() => poolNamespace(src, dir)).toThrow(/inferencePool 'p' needs a namespace: not in a cluster/)
      writeFileSync(join(dir, 'namespace'), 'inference\n')
      expect(poolNamespace(src, dir)).toBe('inference')
    } finally {
      rmSync(dir, { recursive: true, force: true })
    }
  })
})
