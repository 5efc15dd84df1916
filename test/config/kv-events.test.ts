import { describe, expect, it } from 'vitest'
import { parseConfig } from '../../src/config/config.js'
import { buildConfig } from '../../src/commands/serve-config.js'
import { publisherAddresses, KvEventsSchema } from '../../src/config/kv-events.js'

const kv = (o: object) => KvEventsSchema.parse(o)

describe('where an instance publishes its KV events', () => {
  it('a port on the instance host, as vLLM binds tcp://*:5557 in a pod', () => {
    expect(publisherAddresses('http://10.1.2.3:8000', kv({ port: 5557 }))).toEqual([{ rank: 0, endpoint: 'tcp://10.1.2.3:5557', replayEndpoint: undefined }])
  })

  it('an offset from the instance port, for instances sharing a host', () => {
    expect(publisherAddresses('http://127.0.0.1:18001', kv({ port: '+500', replayPort: '+600' }))).toEqual([
      { rank: 0, endpoint: 'tcp://127.0.0.1:18501', replayEndpoint: 'tcp://127.0.0.1:18601' },
    ])
    // No port in the URL: the scheme's own.
    expect(publisherAddresses('http://vllm.local', kv({ port: '+5000' }))[0]!.endpoint).toBe('tcp://vllm.local:5080')
  })

  it('one publisher per data-parallel rank, on port + rank', () => {
    const a = publisherAddresses('http://h:8000', kv({ port: 5557, replayPort: 5600, dataParallelRanks: 3 }))
    expect(a.map((x) => [x.endpoint, x.replayEndpoint])).toEqual([
      ['tcp://h:5557', 'tcp://h:5600'],
      ['tcp://h:5558', 'tcp://h:5601'],
      ['tcp://h:5559', 'tcp://h:5602'],
    ])
  })

  it("an instance's own address wins over the rule, ranks counted from it", () => {
    const a = publisherAddresses('http://h:8000', kv({ port: 5557, dataParallelRanks: 2 }), { endpoint: 'tcp://10.0.0.9:7000', replayEndpoint: 'tcp://10.0.0.9:7100' })
    expect(a.map((x) => x.endpoint)).toEqual(['tcp://10.0.0.9:7000', 'tcp://10.0.0.9:7001'])
    expect(a[1]!.replayEndpoint).toBe('tcp://10.0.0.9:7101')
  })

  it('IPv6 hosts keep their brackets', () => {
    expect(publisherAddresses('http://[::1]:8000', kv({ port: '+1' }))[0]!.endpoint).toBe('tcp://[::1]:8001')
  })

  it('an offset that leaves the port range is an error naming the instance', () => {
    expect(() => publisherAddresses('http://h:65000', kv({ port: '+1000' }))).toThrow(/http:\/\/h:65000.*66000/)
  })
})

describe('kvEvents and tokenizer settings', () => {
  const ep = { name: 'default', instances: ['http://a:8000'] }

  it('take defaults and name bad values', () => {
    const c = parseConfig({ kvEvents: { port: 5557 }, tokenizer: { mode: 'remote' }, endpoints: [ep] })
    expect(c.kvEvents).toEqual({ port: { port: 5557 }, topic: '', dataParallelRanks: 1, resyncMs: 30000, connectWarnMs: 5000, maxMessageBytes: 1024 * 1024 })
    expect(() => parseConfig({ kvEvents: { port: 5557, maxMessageBytes: 1000 }, endpoints: [ep] })).toThrow(/kvEvents\.maxMessageBytes/)
    expect(c.tokenizer).toEqual({ mode: 'remote', timeoutMs: 50 })
    expect(() => parseConfig({ kvEvents: { port: 'x500' }, endpoints: [ep] })).toThrow(/kvEvents\.port: must be a port from 1 to 65535, or an offset.*"x500"/)
    expect(() => parseConfig({ kvEvents: { port: 70000 }, endpoints: [ep] })).toThrow(/kvEvents\.port/)
    expect(() => parseConfig({ tokenizer: { mode: 'local' }, endpoints: [ep] })).toThrow(/tokenizer\.path: local needs path/)
    expect(() => parseConfig({ tokenizer: { mode: 'guess' }, endpoints: [ep] })).toThrow(/tokenizer\.mode/)
    expect(() => parseConfig({ endpoints: [{ ...ep, instances: [{ url: 'http://a:8000', kvEvents: { endpoint: 'http://a:5557' } }] }] })).toThrow(/kvEvents\.endpoint: must be tcp:\/\/HOST:PORT/)
  })

  it('come from flags and their environment twins', () => {
    const b = buildConfig({ upstream: ['http://127.0.0.1:18000'], 'kv-events-port': '+500', 'kv-events-dp-ranks': '2', tokenizer: 'remote' }, { PREFIX_ROUTER_KV_EVENTS_REPLAY_PORT: '+600' })
    expect(b.config.kvEvents).toMatchObject({ port: { offset: 500 }, replayPort: { offset: 600 }, dataParallelRanks: 2 })
    expect(b.config.tokenizer?.mode).toBe('remote')
    expect(() => buildConfig({ upstream: ['http://127.0.0.1:18000'], 'kv-events-port': 'five' }, {})).toThrow(/kvEvents\.port.*"five".*--kv-events-port/)
  })
})
