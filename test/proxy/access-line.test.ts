// The access log's line is written without pino serialising an object, but must stay byte
// for byte the line pino wrote for `log.info(accessLine(...), 'request')`: for every value
// (quotes, backslashes, control characters, non-ASCII, undefined fields, odd numbers) and
// every logger setup (bindings, redaction, serializers, mixins, formatters, hooks).
import { afterEach, describe, expect, it, vi } from 'vitest'
import { pino, type Logger, type LoggerOptions } from 'pino'
import { accessLine, logAccess, newOutcome, type Outcome } from '../../src/proxy/access-log.js'
import { batched } from '../../src/log/logger.js'
import { WRITES_BYTES } from '../../src/log/log-line.js'
import type { Req } from '../../src/proxy/types.js'

afterEach(() => vi.restoreAllMocks())

/** A logger writing to a sink that keeps what it is given, as a string or (bytes) as a Buffer. */
function logger(opts: LoggerOptions = {}, bytes = false) {
  const written: (string | Buffer)[] = []
  const sink = { write: (l: string | Buffer) => void written.push(l), ...(bytes && { [WRITES_BYTES]: true }) }
  return { log: pino({ level: 'info', ...opts }, sink), written }
}

const req = (method: string | undefined, url: string | undefined) => ({ method, url }) as Req

function outcome(o: Partial<Outcome>): Outcome {
  return Object.assign(newOutcome('3f2a9c1e-0b7d-4c55-9e1a-2b3c4d5e6f70', false), o)
}

const proxied = { endpoint: 'default', instance: 'http://10.0.0.7:8000', strategy: 'prefix_aware', decision: 'target', status: 200 }

interface Case {
  name: string
  req: Req
  out: Outcome
  status?: number
  started?: number
  ended?: number
  shutdown?: boolean
}

const CASES: Case[] = [
  { name: 'a proxied request', req: req('POST', '/v1/chat/completions'), out: outcome({ ...proxied, model: 'llama-3', firstByteAt: 15.27, bytesIn: 8192 }), started: 10, ended: 42.04 },
  { name: 'an answer of the router', req: req('GET', '/health'), out: outcome({}), status: 503 },
  { name: 'a replaced request id', req: req('POST', '/invocations'), out: outcome({ ...proxied, requestIdReplaced: true, retries: 2 }) },
  { name: 'shutdown', req: req('POST', '/v1/completions'), out: outcome(proxied), status: 503, shutdown: true },
  { name: 'a tenant', req: req('POST', '/v1/completions'), out: outcome({ ...proxied, tenant: 'acme "corp"\n' }) },
  { name: 'a query string', req: req('GET', '/v1/models?key=secret&x="y"'), out: outcome({ endpoint: 'default' }) },
  { name: 'no method or url', req: req(undefined, undefined), out: outcome({}), status: 400 },
  { name: 'quotes in a model', req: req('POST', '/invocations'), out: outcome({ ...proxied, model: 'say "hi"' }) },
  { name: 'backslashes in a path', req: req('POST', '/endpoints/a\\b/openai/v1/chat/completions'), out: outcome(proxied) },
  { name: 'a request id with quotes and backslashes', req: req('POST', '/x'), out: { ...outcome({}), requestId: 'a"b\\c' } },
  { name: 'control characters', req: req('POST', '/x'), out: outcome({ ...proxied, model: 'a\u0001b\tc\u007f' }) },
  { name: 'non-ASCII', req: req('POST', '/caf\u00e9/\u{1F600}'), out: outcome({ ...proxied, model: 'mod\u00e8le-\u4e2d\u6587' }) },
  { name: 'a lone surrogate', req: req('POST', '/x'), out: outcome({ ...proxied, model: 'bad\ud800x' }) },
  { name: 'a long plain model', req: req('POST', '/x'), out: outcome({ ...proxied, model: 'm'.repeat(150) }) },
  { name: 'a long model with quotes', req: req('POST', '/x'), out: outcome({ ...proxied, model: `${'m'.repeat(120)}"\\` }) },
  { name: 'a long model with a control character', req: req('POST', '/x'), out: outcome({ ...proxied, model: `${'m'.repeat(120)}\n` }) },
  // A client's path is logged as its first characters and its length (src/core/echo.ts)...
  { name: 'a path of 5000 characters', req: req('GET', `/${'p'.repeat(5000)}`), out: outcome({}), status: 404 },
  // ...so what is left to overflow the line buffer is the operator's own (an instance's URL).
  { name: 'a line longer than a line buffer', req: req('POST', '/x'), out: outcome({ ...proxied, instance: `http://${'h'.repeat(5000)}:8000` }) },
  { name: 'an unreadable Content-Length', req: req('POST', '/invocations'), out: outcome({ ...proxied, bytesIn: Number('12abc') }) },
  { name: 'an empty model', req: req('POST', '/x'), out: outcome({ ...proxied, model: '' }) },
  { name: 'odd durations', req: req('POST', '/x'), out: outcome({ ...proxied, firstByteAt: 1e17 + 3 }), started: 0.04, ended: 0.3 },
  { name: 'a huge body count', req: req('POST', '/x'), out: outcome({ ...proxied, bytesIn: 2 ** 60 }) },
]

const LOGGERS: { name: string; opts: LoggerOptions; fast: boolean }[] = [
  { name: 'serve', opts: {}, fast: true },
  { name: 'no timestamp', opts: { timestamp: false }, fast: true },
  { name: 'ISO time', opts: { timestamp: pino.stdTimeFunctions.isoTime }, fast: true },
  { name: 'CRLF and a message key', opts: { crlf: true, messageKey: 'message' }, fast: true },
  { name: 'a level label', opts: { formatters: { level: (label) => ({ severity: label.toUpperCase() }) } }, fast: true },
  { name: 'a non-ASCII hostname', opts: { base: { pid: 7, hostname: 'h\u00f4te' } }, fast: false },
  { name: 'no base', opts: { base: null }, fast: true },
  { name: 'redaction', opts: { redact: ['path', 'model'] }, fast: false },
  { name: 'a serializer', opts: { serializers: { model: (m: string) => m.toUpperCase() } }, fast: false },
  { name: 'a mixin', opts: { mixin: () => ({ zone: 'a', status: 1 }) }, fast: false },
  { name: 'formatters.log', opts: { formatters: { log: (o) => ({ ...o, extra: 1 }) } }, fast: false },
  { name: 'a nested key', opts: { nestedKey: 'payload' }, fast: false },
  { name: 'a message prefix', opts: { msgPrefix: '[router] ' }, fast: false },
  { name: 'a logMethod hook', opts: { hooks: { logMethod(args, method) { method.apply(this, args) } } }, fast: false },
  { name: 'a streamWrite hook', opts: { hooks: { streamWrite: (s) => s.replace('request', 'REQUEST') } }, fast: false },
  { name: 'status as the error key', opts: { errorKey: 'status' }, fast: false },
]

/** What pino wrote for the old object, and what logAccess writes, for one case on one logger. */
function both(c: Case, opts: LoggerOptions, bytes: boolean, child?: Record<string, unknown>) {
  vi.spyOn(Date, 'now').mockReturnValue(1_764_500_000_123)
  const made = (): { log: Logger; written: (string | Buffer)[] } => {
    const l = logger(opts, bytes)
    return child ? { log: l.log.child(child), written: l.written } : l
  }
  const args = [c.req, c.out, c.status ?? c.out.status, c.started ?? 0, c.ended ?? 1.25, c.shutdown ?? false] as const
  const old = made()
  old.log.info(accessLine(...args), 'request')
  const now = made()
  const info = vi.spyOn(now.log, 'info')
  logAccess(now.log, ...args)
  return { old: old.written, now: now.written, throughPino: info.mock.calls.length }
}

describe('access line', () => {
  for (const l of LOGGERS) {
    describe(`on a logger with ${l.name}`, () => {
      for (const c of CASES) {
        it(`is pino's line for ${c.name}`, () => {
          const r = both(c, l.opts, false)
          expect(r.now).toHaveLength(1)
          expect(r.now).toEqual(r.old)
          expect(typeof r.now[0]).toBe('string')
        })
      }
    })
  }

  it('keeps the old content: keys in order, undefined fields left out', () => {
    const r = both(CASES[0]!, {}, false)
    const fields = JSON.parse(r.now[0] as string) as Record<string, unknown>
    expect(Object.keys(fields)).toEqual(['level', 'time', 'pid', 'hostname', 'requestId', 'method', 'path', 'status', 'endpoint', 'model', 'strategy', 'instance', 'decision', 'retries', 'ttfbMs', 'ms', 'bytesIn', 'msg'])
    expect(fields).toMatchObject({ ttfbMs: 5.3, ms: 32, bytesIn: 8192, retries: 0, status: 200 })
  })

  it('is written without pino for plain values on a logger that leaves lines as they are, and through pino otherwise', () => {
    const plain = new Set(['a proxied request', 'an answer of the router', 'a replaced request id', 'shutdown', 'a tenant', 'a query string', 'no method or url', 'a long plain model', 'a path of 5000 characters', 'an unreadable Content-Length', 'an empty model', 'odd durations', 'a huge body count'])
    for (const l of LOGGERS) {
      for (const c of CASES) expect([l.name, c.name, both(c, l.opts, false).throughPino]).toEqual([l.name, c.name, l.fast && plain.has(c.name) ? 0 : 1])
    }
  })

  it("follows a child logger's bindings", () => {
    for (const c of CASES) {
      const r = both(c, {}, false, { endpoint: 'e"1', worker: 3 })
      expect(r.now).toEqual(r.old)
    }
  })

  it('hands a destination that takes bytes the bytes pino would have written', () => {
    for (const c of CASES) {
      const r = both(c, {}, true)
      expect(r.now).toHaveLength(1)
      const bytes = (x: string | Buffer) => (typeof x === 'string' ? Buffer.from(x) : x)
      expect(bytes(r.now[0]!).equals(bytes(r.old[0]!))).toBe(true)
      // Plain lines come as bytes, which the destination may keep: each is its own buffer.
      if (r.throughPino === 0) expect(Buffer.isBuffer(r.now[0])).toBe(true)
    }
    const a = both(CASES[0]!, {}, true).now[0] as Buffer
    const b = both(CASES[1]!, {}, true).now[0] as Buffer
    expect(a.toString()).not.toEqual(b.toString())
    expect(a.buffer === b.buffer && a.byteOffset === b.byteOffset).toBe(false)
  })

  it("spells durations and counts as pino's String() does", () => {
    const values = [0, -0, 0.1, 0.05, 0.15, 1.25, 9.95, 12.3, 99.99, 100, 1234.5, 4294967296.7, 2 ** 53, 1e15, 1e21, 1e-7, -3.4, NaN, Infinity, -Infinity]
    for (let i = 0; i < 2000; i++) values.push(Math.round(Math.random() * 10 ** (i % 12)) / 10, Math.random() * 10 ** (i % 9))
    for (const v of values) {
      const c: Case = { name: String(v), req: req('POST', '/x'), out: outcome({ ...proxied, bytesIn: v, firstByteAt: v }), started: 0, ended: v }
      const r = both(c, {}, false)
      expect([v, r.now]).toEqual([v, r.old])
    }
  })

  it('goes through the batched destination as pino lines would', async () => {
    // The batch writes to a file; what it holds must be the lines pino would have written.
    const { mkdtempSync, readFileSync } = await import('node:fs')
    const { tmpdir } = await import('node:os')
    const { join } = await import('node:path')
    const file = join(mkdtempSync(join(tmpdir(), 'access-line-')), 'log')
    const dest = batched(file)
    const log = pino({ level: 'info' }, dest)
    const expected: string[] = []
    const sink = pino({ level: 'info' }, { write: (s: string) => void expected.push(s) })
    vi.spyOn(Date, 'now').mockReturnValue(1_764_500_000_123)
    for (const c of CASES) {
      const args = [c.req, c.out, c.status ?? c.out.status, c.started ?? 0, c.ended ?? 1.25, c.shutdown ?? false] as const
      logAccess(log, ...args)
      sink.info(accessLine(...args), 'request')
    }
    await new Promise<void>((resolve) => (dest as unknown as { flush(cb: () => void): void }).flush(() => resolve()))
    expect(readFileSync(file, 'utf8')).toEqual(Buffer.from(expected.join('')).toString('utf8'))
  })
})
