// Endpoint.pick reads the instances in rotation and each model's group as of the last sync():
// these check that every change it publishes (an instance marked down, a reload that changes
// models) is seen by the next pick, and that no pick leaves a counter raised.
import { afterEach, describe, expect, it } from 'vitest'
import { parseConfig } from '../../src/config/config.js'
import { RequestError } from '../../src/core/errors.js'
import type { Endpoint } from '../../src/fleet/endpoint.js'
import { LocalEndpoint } from '../../src/fleet/local-endpoint.js'

const A = 'http://127.0.0.1:9'
const B = 'http://127.0.0.2:9'

function config(aModels: string[], bModels: string[]) {
  return parseConfig({
    listen: { host: '127.0.0.1', port: 0 },
    health: { intervalMs: 0 },
    discovery: { modelsIntervalMs: 0, metricsIntervalMs: 0 },
    endpoints: [{ name: 'default', instances: [{ url: A, models: aModels }, { url: B, models: bModels }] }],
  })
}

const endpoints: Endpoint[] = []
afterEach(async () => {
  for (const ep of endpoints.splice(0)) {
    expect(ep.router.instances().reduce((n, i) => n + i.inFlight, 0)).toBe(0)
    await ep.close()
  }
})

function make(aModels: string[], bModels: string[]): Endpoint {
  const c = config(aModels, bModels)
  const ep = new LocalEndpoint(c, c.endpoints[0]!)
  endpoints.push(ep)
  return ep
}

/** The instance a request for `model` goes to, or the code it is refused with. */
function pickFor(ep: Endpoint, model: string | undefined, key = 'a prompt'): string {
  try {
    const { lease, instance } = ep.pick(key, undefined, model)
    lease.release()
    return instance.id
  } catch (err) {
    if (err instanceof RequestError) return `${err.status} ${err.code}`
    throw err
  }
}

describe('Endpoint.pick', () => {
  it('routes each model to the instances serving it and refuses one served nowhere, request after request', () => {
    const ep = make(['m1'], ['m2'])
    for (let i = 0; i < 3; i++) {
      expect(pickFor(ep, 'm1', `k${i}`)).toBe(A)
      expect(pickFor(ep, 'm2', `k${i}`)).toBe(B)
      expect(pickFor(ep, 'nope')).toBe('404 model_not_found')
    }
  })

  it('sees an instance marked down at the next pick, for the model and for the endpoint', () => {
    const ep = make(['m1'], ['m2'])
    expect(pickFor(ep, 'm2')).toBe(B)
    ep.markDown(ep.instances.get(B)!, 'test')
    expect(ep.healthy().map((i) => i.id)).toEqual([A])
    expect(pickFor(ep, 'm2')).toBe('503 no_healthy_instance')
    expect(pickFor(ep, 'm1')).toBe(A)
    ep.markDown(ep.instances.get(A)!, 'test')
    expect(ep.healthy()).toEqual([])
    expect(pickFor(ep, undefined)).toBe('503 no_healthy_instance')
  })

  it('sees a reload that changes the models', () => {
    const ep = make(['m1'], ['m2'])
    expect(pickFor(ep, 'm3')).toBe('404 model_not_found')
    const next = config(['m1', 'm3'], ['m2'])
    ep.update(next, next.endpoints[0]!)
    expect(pickFor(ep, 'm3')).toBe(A)
    // Instances whose models are unknown take any model.
    const open = config([], ['m2'])
    ep.update(open, open.endpoints[0]!)
    expect(pickFor(ep, 'm3')).toBe(A)
    expect(pickFor(ep, 'm2')).toBe(B)
  })

  it('answers requests for many unknown models (a bounded cache) without a wrong answer', () => {
    const ep = make(['m1'], ['m2'])
    for (let i = 0; i < 3000; i++) expect(pickFor(ep, `unknown-${i}`)).toBe('404 model_not_found')
    expect(pickFor(ep, 'm1')).toBe(A)
  })
})
