import { mkdtempSync, rmSync, writeFileSync } from 'node:fs'
import { tmpdir } from 'node:os'
import { join } from 'node:path'
import { afterAll, describe, expect, it } from 'vitest'
import { ConfigError, endpointRouting, parseConfig } from '../../src/config/config.js'
import { buildConfig } from '../../src/commands/serve-config.js'
import { CliError } from '../../src/command-line/cli-error.js'

const dir = mkdtempSync(join(tmpdir(), 'pr-config-'))
afterAll(() => rmSync(dir, { recursive: true, force: true }))

function messageOf(fn: () => unknown): string {
  try {
    fn()
  } catch (err) {
    return (err as Error).message
  }
  throw new Error('expected a throw')
}

describe('configuration schema', () => {
  it('fills defaults', () => {
    const c = parseConfig({ endpoints: [{ name: 'default', instances: ['http://a:8000'] }] })
    // concurrencyThreshold stays unset: the strategy's default (10, or none for longest_prefix).
    expect(c.routing).toEqual({
      strategy: 'longest_prefix',
      prefixLength: 4096,
      vnodes: 8192,
      blockSize: 64,
      indexBlocks: 65536,
      placement: 'balanced',
      matchLength: 65536,
      loadFactor: 3,
      prefillWeight: 6,
      exactBlockSize: 16,
      exactCapacity: 2097152,
      cpuBlockWeight: 0.5,
      pendingMs: 10000,
      engineLoadAll: false,
    })
    expect(c.listen).toEqual({ host: '0.0.0.0', port: 8080 })
    expect(c.admin).toEqual({ host: '127.0.0.1', port: 9090 })
    expect(c.limits.maxBodyBytes).toBe(16 << 20)
    expect(c.endpoints[0]!.instances[0]).toEqual({ url: 'http://a:8000', weight: 1, models: [], role: 'both' })
  })

  it('names every bad key and what it accepts', () => {
    const msg = messageOf(() =>
      parseConfig({
        routing: { strategy: 'round_robin', prefixLength: 10, concurrencyThreshold: 2000, placement: 'spread' },
        listen: { port: 70000 },
        endpoints: [{ name: 'bad name!', instances: ['ftp://x'] }],
        bogus: 1,
      }),
    )
    expect(msg).toMatch(/^invalid config:/)
    expect(msg).toMatch(/routing\.strategy: must be one of random, least_outstanding_requests, prefix_aware, longest_prefix; got "round_robin"/)
    expect(msg).toMatch(/routing\.prefixLength: Too small: expected number to be >=1024; got 10\n/)
    expect(msg).not.toMatch(/got "round_robin"; got/)
    expect(msg).toMatch(/routing\.placement: Invalid option: expected one of "hash"\|"balanced"; got "spread"/)
    expect(msg).toMatch(/routing\.concurrencyThreshold: Too big: expected number to be <=1024/)
    expect(msg).toMatch(/listen\.port: Too big/)
    expect(msg).toMatch(/endpoints\[0\]\.name: must be 1–63 letters, digits/)
    expect(msg).toMatch(/endpoints\[0\]\.instances\[0\]: /)
    expect(msg).toMatch(/unknown key 'bogus'/)
  })

  it('instances listed at the top level: the shape they go in, not a near name', () => {
    for (const key of ['upstreams', 'instances']) {
      const msg = messageOf(() => parseConfig({ [key]: ['http://a:8000'] }))
      expect(msg).toMatch(new RegExp(`unknown key '${key}': instances belong to an endpoint: endpoints: \\[\\{ name: default, instances: \\[http://a:8000, \\.\\.\\.\\] \\}\\]`))
      expect(msg).not.toMatch(/did you mean/)
    }
    // `upstream` is the connection settings: a list there is instances too.
    expect(messageOf(() => parseConfig({ upstream: ['http://a:8000'] }))).toMatch(/upstream: .*expected object, received array; upstream is the connection settings \(timeouts, connections\); instances belong to an endpoint: endpoints: \[\{ name: default, instances: \[/)
  })

  it('rejects duplicate endpoint names and empty instance lists', () => {
    expect(messageOf(() => parseConfig({ endpoints: [{ name: 'a', instances: ['http://x'] }, { name: 'a', instances: ['http://y'] }] }))).toMatch(/endpoints: endpoint names must be unique/)
    expect(messageOf(() => parseConfig({ endpoints: [{ name: 'a', instances: [] }] }))).toMatch(/endpoints\[0\]\.instances: must list at least one instance/)
  })

  it('endpoint routing overrides the global routing', () => {
    const c = parseConfig({ routing: { strategy: 'random' }, endpoints: [{ name: 'a', instances: ['http://x'], routing: { concurrencyThreshold: 3 } }] })
    expect(endpointRouting(c, c.endpoints[0]!)).toMatchObject({ strategy: 'random', concurrencyThreshold: 3, prefixLength: 4096 })
  })
})

describe('config from file, environment and flags', () => {
  const yamlFile = join(dir, 'c.yaml')
  writeFileSync(
    yamlFile,
    ['routing:', '  strategy: least_outstanding_requests', '  prefixLength: 2048', 'endpoints:', '  - name: main', '    instances:', '      - http://10.0.0.1:8000', '      - url: http://10.0.0.2:8000', '        weight: 2', '        models: [llama]', ''].join('\n'),
  )

  it('reads YAML and JSON files', () => {
    const { config } = buildConfig({ config: yamlFile }, {})
    expect(config.routing.strategy).toBe('least_outstanding_requests')
    expect(config.endpoints[0]!.instances[1]).toEqual({ url: 'http://10.0.0.2:8000', weight: 2, models: ['llama'], role: 'both' })
    const jsonFile = join(dir, 'c.json')
    writeFileSync(jsonFile, JSON.stringify({ endpoints: [{ name: 'j', instances: ['http://j:1'] }] }))
    expect(buildConfig({ config: jsonFile }, {}).config.endpoints[0]!.name).toBe('j')
  })

  it('environment overrides the file and flags override the environment', () => {
    const env = { PREFIX_ROUTER_STRATEGY: 'random', PREFIX_ROUTER_PREFIX_LENGTH: '8192', PREFIX_ROUTER_PORT: '7000' }
    const { config } = buildConfig({ config: yamlFile, 'prefix-length': '1024' }, env)
    expect(config.routing).toMatchObject({ strategy: 'random', prefixLength: 1024 })
    expect(config.listen.port).toBe(7000)
  })

  it('--upstream (or PREFIX_ROUTER_UPSTREAMS) replaces the first endpoint’s instances', () => {
    const a = buildConfig({ config: yamlFile, upstream: ['http://u:1', 'http://u:2'] }, {})
    expect(a.config.endpoints[0]).toMatchObject({ name: 'main', instances: [{ url: 'http://u:1' }, { url: 'http://u:2' }] })
    const b = buildConfig({}, { PREFIX_ROUTER_UPSTREAMS: 'http://e:1, http://e:2' })
    expect(b.config.endpoints[0]).toMatchObject({ name: 'default', instances: [{ url: 'http://e:1' }, { url: 'http://e:2' }] })
    expect(buildConfig({}, {}).hasUpstreams).toBe(false)
  })

  it('bad values name the flag, the variable or the key', () => {
    expect(messageOf(() => buildConfig({ 'prefix-length': 'lots' }, {}))).toBe("--prefix-length must be a whole number; got 'lots'")
    expect(messageOf(() => buildConfig({ 'concurrency-threshold': '0', upstream: ['http://x:1'] }, {}))).toMatch(/routing\.concurrencyThreshold: Too small/)
    expect(messageOf(() => buildConfig({}, { PREFIX_ROUTER_DEBUG_HEADERS: 'maybe' }))).toBe("PREFIX_ROUTER_DEBUG_HEADERS must be true or false; got 'maybe'")
    expect(messageOf(() => buildConfig({ config: join(dir, 'missing.yaml') }, {}))).toMatch(/cannot read config file '.*missing\.yaml': ENOENT/)
    const broken = join(dir, 'broken.yaml')
    writeFileSync(broken, 'routing: [unclosed')
    expect(messageOf(() => buildConfig({ config: broken }, {}))).toMatch(/is not valid YAML/)
    expect(() => buildConfig({ 'tls-cert': 'c.pem' }, {})).toThrow(CliError)
    expect(() => buildConfig({ upstream: ['not a url'] }, {})).toThrow(ConfigError)
  })
})
