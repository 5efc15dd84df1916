// The `discovery` key of an endpoint: what it accepts, its defaults, and errors that name
// the bad key and what it was given.
import { describe, expect, it } from 'vitest'
import { parseConfig } from '../../src/config/config.js'
import { mkdtempSync, rmSync, writeFileSync } from 'node:fs'
import { tmpdir } from 'node:os'
import { join } from 'node:path'
import type { V1Pod } from '@kubernetes/client-node'
import { poolInstances, poolNamespace, poolSelector, type InferencePool } from '../../src/fleet/discovery/inference-pool.js'
import { instancesOf, selectorOf } from '../../src/fleet/discovery/kubernetes.js'

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
      { type: 'kubernetes', service: 'vllm', scheme: 'http' },
      { type: 'inferencePool', name: 'vllm-llama3', scheme: 'http' },
      { type: 'inferencePool', name: 'vllm.gpu', namespace: 'inference', scheme: 'https' },
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
  ])('%j is refused', (discovery, message) => {
    expect(messageOf(() => parse(discovery))).toMatch(message)
  })
})

describe('EndpointSlices to instances', () => {
  const slice = (endpoints: unknown[], ports: unknown[] = [{ name: 'http', port: 8000 }]) => ({ metadata: { name: 's' }, addressType: 'IPv4', ports, endpoints }) as never
  it('ready addresses only, on the chosen port, IPv6 in brackets', () => {
    const cfg = { type: 'kubernetes', service: 'vllm', scheme: 'http' } as const
    const list = instancesOf([slice([{ addresses: ['10.0.0.1'] }, { addresses: ['10.0.0.2'], conditions: { ready: false } }, { addresses: ['fd00::3'], conditions: { ready: true } }])], cfg)
    expect(list.map((i) => i.url)).toEqual(['http://10.0.0.1:8000', 'http://[fd00::3]:8000'])
    const named = instancesOf([slice([{ addresses: ['10.0.0.1'] }], [{ name: 'metrics', port: 9000 }, { name: 'http', port: 8000 }])], { ...cfg, port: 'http' })
    expect(named.map((i) => i.url)).toEqual(['http://10.0.0.1:8000'])
    // A slice without the named port has no instance to offer.
    expect(instancesOf([slice([{ addresses: ['10.0.0.1'] }])], { ...cfg, port: 'grpc' })).toEqual([])
    expect(instancesOf([slice([{ addresses: ['10.0.0.1'] }])], { ...cfg, port: 7000, scheme: 'https' }).map((i) => i.url)).toEqual(['https://10.0.0.1:7000'])
  })

  it("the Service's label and a given selector together", () => {
    expect(selectorOf({ type: 'kubernetes', service: 'vllm', scheme: 'http' })).toBe('kubernetes.io/service-name=vllm')
    expect(selectorOf({ type: 'kubernetes', service: 'vllm', labelSelector: 'tier=gpu', scheme: 'http' })).toBe('kubernetes.io/service-name=vllm,tier=gpu')
    expect(selectorOf({ type: 'kubernetes', labelSelector: 'app=vllm', scheme: 'http' })).toBe('app=vllm')
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

  it("the selector as the API takes it, keys sorted; none when it has no label", () => {
    expect(poolSelector(pool({ tier: 'gpu', 'app.kubernetes.io/name': 'vllm' }, [8000]))).toBe('app.kubernetes.io/name=vllm,tier=gpu')
    expect(poolSelector(pool({}, [8000]))).toBeUndefined()
    expect(poolSelector({ metadata: { name: 'p' } })).toBeUndefined()
  })

  it("the namespace: the configured one, else the service account's, else an error", () => {
    const dir = mkdtempSync(join(tmpdir(), 'pr-sa-'))
    try {
      expect(poolNamespace({ type: 'inferencePool', name: 'p', namespace: 'given', scheme: 'http' }, dir)).toBe('given')
      expect(() => poolNamespace({ type: 'inferencePool', name: 'p', scheme: 'http' }, dir)).toThrow(/inferencePool 'p' needs a namespace: not in a cluster/)
      writeFileSync(join(dir, 'namespace'), 'inference\n')
      expect(poolNamespace({ type: 'inferencePool', name: 'p', scheme: 'http' }, dir)).toBe('inference')
    } finally {
      rmSync(dir, { recursive: true, force: true })
    }
  })
})
