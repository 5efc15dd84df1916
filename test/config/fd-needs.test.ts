// The numbers the front's connection cap is worked out from, read from the configuration.
import { describe, expect, it } from 'vitest'
import { parseConfig } from '../../src/config/config.js'
import { descriptorNeeds } from '../../src/config/fd-needs.js'
import { frontMaxConnections } from '../../src/net/fd-limit.js'

describe('descriptor needs', () => {
  it('counts the instances of every endpoint, with the pool each gets', () => {
    const c = parseConfig({ upstream: { connections: 10 }, endpoints: [{ name: 'a', instances: ['http://a:1'] }, { name: 'b', instances: ['http://b:1', 'http://c:1'] }] })
    expect(descriptorNeeds(c)).toEqual({ instances: 3, connectionsPerInstance: 10, maxConnections: undefined })
  })

  it('takes the pool default and limits.maxConnections as parsed', () => {
    const three = { name: 'a', instances: ['http://10.0.0.1:8000', 'http://10.0.0.2:8000', 'http://10.0.0.3:8000'] }
    expect(descriptorNeeds(parseConfig({ endpoints: [three] }))).toEqual({ instances: 3, connectionsPerInstance: 128, maxConnections: undefined })
    const capped = parseConfig({ endpoints: [three], limits: { maxConnections: 7 } })
    expect(descriptorNeeds(capped).maxConnections).toBe(7)
    expect(frontMaxConnections(descriptorNeeds(capped), 256)).toBe(7)
  })
})
