// A discovery source that reports the same list again while a new instance's first probe is
// under way (a DNS source every interval, a Kubernetes source as another watch connects):
// that report, too, has joined only once the instance is probed. The router's start waits on
// the first report that joins, so an early one would let it serve before the instance is in.
import type http from 'node:http'
import { afterEach, describe, expect, it } from 'vitest'
import { parseConfig } from '../../src/config/config.js'
import { LocalEndpoint } from '../../src/fleet/local-endpoint.js'
import { entry } from '../../src/fleet/discovery/source.js'
import { startStub, until, type Stub } from '../proxy/helpers.js'

let stub: Stub | undefined
let ep: LocalEndpoint | undefined
afterEach(async () => {
  await ep?.close()
  await stub?.close()
})

describe('a discovered instance joining', () => {
  it('a list naming it again before its first probe answers joins when that probe does, not at once', async () => {
    const held: http.ServerResponse[] = []
    stub = await startStub('slow', (req, res) => {
      if (req.url === '/health') return void held.push(res)
      res.writeHead(404).end()
    })
    const c = parseConfig({ listen: { host: '127.0.0.1', port: 0 }, health: { intervalMs: 0 }, endpoints: [{ name: 'default', discovery: [{ type: 'file', path: 'unused.yaml' }] }] })
    ep = new LocalEndpoint(c, c.endpoints[0]!)
    const list = [entry(stub.url)]
    const joined: string[] = []
    void ep.owner.setDiscovered('src', list).joined.then(() => joined.push('first'))
    await until(() => held.length === 1, 10_000, 'the first probe sent')
    void ep.owner.setDiscovered('src', list).joined.then(() => joined.push('again'))
    // Both wait on the one probe: the instance is not in yet, neither has joined.
    await new Promise((r) => setImmediate(r))
    expect(joined).toEqual([])
    expect(ep.instances.has(stub.url)).toBe(false)
    held[0]!.writeHead(200).end()
    await until(() => joined.length === 2, 10_000, 'both lists joined')
    expect(ep.instances.get(stub.url)?.inRotation).toBe(true)
    expect(held).toHaveLength(1)
  })
})
