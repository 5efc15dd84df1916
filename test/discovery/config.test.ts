// The `discovery` key of an endpoint: what it accepts, its defaults, and errors that name
// the bad key and what it was given.
import { describe, expect, it } from 'vitest'
import { parseConfig } from '../../src/config.js'
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
    const c = parse([{ type: 'dns', url: 'http://vllm:8000' }, { type: 'file', path: 'fleet.yaml' }, { type: 'kubernetes', service: 'vllm' }])
    expect(c.endpoints[0]!.instances).toEqual([])
    expect(c.endpoints[0]!.discovery).toEqual([
      { type: 'dns', url: 'http://vllm:8000', intervalMs: 5000, srv: false },
      { type: 'file', path: 'fleet.yaml' },
      { type: 'kubernetes', service: 'vllm', scheme: 'http' },
    ])
  })

  it.each([
    [[], /endpoints\[0\]\.instances: must list at least one instance, or discovery sources/],
    [[{ type: 'dns', url: 'vllm:8000' }], /discovery\[0\]\.url: must be an http:\/\/ or https:\/\/ URL naming the host to resolve .*; got "vllm:8000"/],
    [[{ type: 'dns', url: 'http://vllm:8000', server: 'dns.local:53' }], /discovery\[0\]\.server: must be IP:PORT .*; got "dns\.local:53"/],
    [[{ type: 'dns', url: 'http://vllm:8000', intervalMs: 5 }], /discovery\[0\]\.intervalMs: Too small: expected number to be >=100; got 5/],
    [[{ type: 'kubernetes', namespace: 'x' }], /discovery\[0\]\.service: give service \(a Service's name\) or labelSelector/],
    [[{ type: 'kubernetes', service: 'vllm', port: 0 }], /discovery\[0\]\.port/],
    [[{ type: 'consul' }], /discovery\[0\]\.type: .*'file' \| 'dns' \| 'kubernetes'; got "consul"/],
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
