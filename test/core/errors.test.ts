// One error model: everything the package throws is a PrefixRouterError with a stable code,
// while the argument errors stay the TypeError / RangeError that callers already test for.
import { readdirSync, readFileSync } from 'node:fs'
import { dirname, join, relative, resolve } from 'node:path'
import { fileURLToPath } from 'node:url'
import { describe, expect, it } from 'vitest'
import {
  InvalidArgTypeError,
  NoInstanceError,
  OutOfRangeError,
  PrefixRouterError,
  RequestError,
  Router,
  RouterClosedError,
  xxh3,
} from '../../src/index.js'
import { CliError } from '../../src/command-line/cli-error.js'
import { ConfigError, parseConfig } from '../../src/config/config.js'
import { DiscoveryError } from '../../src/fleet/discovery/source.js'
import { openAIRequest } from '../../src/core/key/openai-key.js'
import { tenantOf } from '../../src/core/key/tenant.js'
import { ProxyError, toProxyError } from '../../src/request/errors.js'
import { UpstreamStatusError } from '../../src/proxy/forward.js'
import { TraceError } from '../../src/replay/trace-error.js'
import { MissingPackageError } from '../../src/core/optional-packages.js'

const thrown = (f: () => unknown): unknown => {
  try {
    f()
  } catch (err) {
    return err
  }
  throw new Error('did not throw')
}

describe('PrefixRouterError', () => {
  it('carries code, message, details and cause', () => {
    const cause = new Error('under')
    const e = new PrefixRouterError('X_CODE', 'what went wrong', { details: { limit: 3 }, cause })
    expect(e).toBeInstanceOf(Error)
    expect(e).toMatchObject({ name: 'PrefixRouterError', code: 'X_CODE', message: 'what went wrong', details: { limit: 3 }, cause })
    expect(new PrefixRouterError('X', 'm').details).toBeUndefined()
  })

  it('argument errors are TypeError / RangeError and PrefixRouterError at once', () => {
    const t = thrown(() => xxh3(42 as unknown as string))
    expect(t).toBeInstanceOf(TypeError)
    expect(t).toBeInstanceOf(InvalidArgTypeError)
    expect(t).toBeInstanceOf(PrefixRouterError)
    expect(t).toMatchObject({ name: 'TypeError', code: 'ERR_INVALID_ARG_TYPE', details: { key: 'data' } })
    const r = thrown(() => xxh3('x', -1n))
    expect(r).toBeInstanceOf(RangeError)
    expect(r).toBeInstanceOf(PrefixRouterError)
    expect(r).toMatchObject({ name: 'RangeError', code: 'ERR_OUT_OF_RANGE', details: { key: 'seed' } })
  })

  it('a subclass still tests by prototype: the mark makes only the base accept foreign chains', () => {
    const r = new OutOfRangeError('k', 'small', 9)
    expect(r instanceof NoInstanceError).toBe(false)
    expect(r instanceof RequestError).toBe(false)
    expect(new RequestError('c', 'm') instanceof NoInstanceError).toBe(false)
    expect(new RangeError('plain') instanceof PrefixRouterError).toBe(false)
    expect(Object.assign(new Error('x'), { code: 'X' }) instanceof PrefixRouterError).toBe(false)
  })

  it('new Router({ instances: [] }) throws a coded RangeError, as the README says', () => {
    const e = thrown(() => new Router({ instances: [] }))
    expect(e).toBeInstanceOf(RangeError)
    expect(e).toBeInstanceOf(PrefixRouterError)
    expect(e).toMatchObject({ code: 'ERR_OUT_OF_RANGE', message: 'instances must list at least one instance; got an empty array' })
    const dup = thrown(() => new Router({ instances: [{ id: 'a' }, { id: 'a' }] }))
    expect(dup).toMatchObject({ code: 'ERR_OUT_OF_RANGE', details: { key: 'instances[1].id' } })
  })

  it('the router: NoInstanceError from pick, RouterClosedError after close', () => {
    const r = new Router({ instances: [{ id: 'a', groups: ['m'] }] })
    const g = thrown(() => r.pick('x', { group: 'other' }))
    expect(g).toBeInstanceOf(NoInstanceError)
    expect(g).toBeInstanceOf(PrefixRouterError)
    expect(g).toMatchObject({ name: 'NoInstanceError', code: 'ROUTER_NO_GROUP' })
    r.close()
    const c = thrown(() => r.pick('x'))
    expect(c).toBeInstanceOf(RouterClosedError)
    expect(c).toMatchObject({ code: 'ROUTER_CLOSED', message: 'router is closed' })
  })

  it('a request the router refuses is a RequestError with an HTTP status, and the proxy gives it OpenAI shape', () => {
    const e = thrown(() => openAIRequest('chat', Buffer.from('{"messages":[]}'), 4096))
    expect(e).toBeInstanceOf(RequestError)
    expect(e).not.toBeInstanceOf(ProxyError)
    expect(e).toMatchObject({ name: 'RequestError', code: 'missing_messages', status: 400 })
    expect(thrown(() => tenantOf('\u0001'))).toMatchObject({ code: 'invalid_tenant', status: 400 })
    const p = toProxyError(e as RequestError)
    expect(JSON.parse(p.body())).toEqual({ error: { message: (e as Error).message, type: 'invalid_request_error', code: 'missing_messages' } })
    const busy = toProxyError(new RequestError('no_healthy_instance', 'none', 503, { details: { retryAfterSeconds: 4 } }))
    expect(busy).toMatchObject({ status: 503, type: 'service_unavailable', headers: { 'retry-after': '4' } })
    expect(busy).toBeInstanceOf(RequestError)
    expect(busy).toBeInstanceOf(PrefixRouterError)
  })

  it('the CLI, config, discovery, forwarding and replay errors keep their codes', () => {
    const config = thrown(() => parseConfig({ routing: { strategy: 'nope' } }))
    expect(config).toBeInstanceOf(ConfigError)
    expect(config).toMatchObject({ code: 'ERR_CONFIG' })
    const cases: [PrefixRouterError, string, string][] = [
      [new CliError('bad flag'), 'CliError', 'ERR_CLI_USAGE'],
      [new CliError('port in use', 1), 'CliError', 'ERR_CLI_FAILED'],
      [config as ConfigError, 'ConfigError', 'ERR_CONFIG'],
      [new DiscoveryError('no file'), 'DiscoveryError', 'ERR_DISCOVERY'],
      [new UpstreamStatusError(503), 'UpstreamStatusError', 'PR_UPSTREAM_STATUS'],
      [new TraceError('t.jsonl', 3, 'bad'), 'TraceError', 'ERR_TRACE'],
      [new ProxyError(404, 'invalid_request_error', 'not_found', 'no route'), 'ProxyError', 'not_found'],
      [new MissingPackageError([{ feature: 'kubernetes', packages: ['@kubernetes/client-node'] }]), 'MissingPackageError', 'ERR_MISSING_PACKAGE'],
    ]
    for (const [e, name, code] of cases) {
      expect(e).toBeInstanceOf(PrefixRouterError)
      expect({ name: e.name, code: e.code }).toEqual({ name, code })
    }
  })

  it('no module outside the simulator throws an uncoded Error class or an ad-hoc coded Error', () => {
    const root = resolve(dirname(fileURLToPath(import.meta.url)), '../..')
    const walk = (dir: string): string[] =>
      readdirSync(dir, { withFileTypes: true }).flatMap((e) => (e.isDirectory() ? walk(join(dir, e.name)) : e.name.endsWith('.ts') ? [join(dir, e.name)] : []))
    // The argument errors extend TypeError / RangeError on purpose, and carry the mark.
    const allowed = new Set([
      'src/core/errors.ts: class PrefixRouterError extends Error',
      'src/core/errors.ts: class InvalidArgTypeError extends TypeError',
      'src/core/errors.ts: class OutOfRangeError extends RangeError',
    ])
    const bad: string[] = []
    for (const f of walk(join(root, 'src'))) {
      const rel = relative(root, f)
      if (rel.startsWith('src/sim/')) continue
      for (const m of readFileSync(f, 'utf8').matchAll(/class \w+ extends (?:Error|TypeError|RangeError)\b|Object\.assign\(new Error\(/g)) {
        if (!allowed.has(`${rel}: ${m[0]}`)) bad.push(`${rel}: ${m[0]}`)
      }
    }
    expect(bad).toEqual([])
  })
})
