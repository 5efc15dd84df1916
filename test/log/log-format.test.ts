// --log-format: json (the default, one JSON object a line) and pretty (one line a record for a
// person: time, level, message, key=value; access-log lines condensed), in serve as an
// operator runs it (the built CLI in front of simulator workers) and line by line.
import { spawn, spawnSync, type ChildProcessWithoutNullStreams } from 'node:child_process'
import { fileURLToPath } from 'node:url'
import { pino } from 'pino'
import { afterAll, afterEach, beforeAll, describe, expect, it } from 'vitest'
import { logAccess, newOutcome } from '../../src/proxy/access-log.js'
import { prettyDestination, prettyLine } from '../../src/log/pretty-log.js'
import type { Req } from '../../src/proxy/types.js'
import { startSimFleet, type SimFleet } from '../../src/sim/index.js'
import { endChildren } from '../helpers/children.js'
import { chat, post, startRouter, until } from '../proxy/helpers.js'

const root = fileURLToPath(new URL('../..', import.meta.url))
const cli = fileURLToPath(new URL('../../dist/cli.js', import.meta.url))
const ISO = String.raw`\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{3}Z`

/** A pino logger writing pretty lines (no colour) into `lines`. */
function prettyLogger(lines: string[]) {
  const inner = { write: (s: string) => void lines.push(...s.split('\n').filter((l) => l !== '')) }
  return pino({ level: 'info' }, prettyDestination(inner, false))
}

describe('pretty lines', () => {
  it('an access-log line (written as bytes, as serve writes it): time, level, message, method path status instance duration, then key=value', () => {
    const lines: string[] = []
    const out = Object.assign(newOutcome('rid-1', false), { endpoint: 'default', instance: 'http://10.0.0.5:8000', strategy: 'longest_prefix', status: 200, decision: 'target', model: 'llama 3', firstByteAt: 8 })
    logAccess(prettyLogger(lines), { method: 'POST', url: '/v1/chat/completions?key=secret' } as Req, out, 200, 0, 12.34, false)
    expect(lines).toHaveLength(1)
    expect(lines[0]).toMatch(new RegExp(`^${ISO} INFO  request POST /v1/chat/completions 200 http://10\\.0\\.0\\.5:8000 12\\.3ms requestId=rid-1 endpoint=default model="llama 3" strategy=longest_prefix decision=target retries=0 ttfbMs=8$`))
  })

  it('a line the router answered itself shows - for the instance', () => {
    const lines: string[] = []
    logAccess(prettyLogger(lines), { method: 'GET', url: '/nope' } as Req, newOutcome('rid-2', false), 404, 0, 1, false)
    expect(lines[0]).toMatch(new RegExp(`^${ISO} INFO  request GET /nope 404 - 1ms requestId=rid-2$`))
  })

  it('other records: fields as key=value, objects as dotted keys, quoted where needed; an error with its stack below', () => {
    const lines: string[] = []
    const log = prettyLogger(lines)
    log.warn({ instance: 'sim-1', reason: 'connection refused', engineLoad: { running: 3, waiting: 0 }, ids: [1, 2], empty: '', eq: 'a=b' }, 'instance down')
    log.error({ err: new Error('boom') }, 'request failed')
    expect(lines[0]).toMatch(new RegExp(`^${ISO} WARN  instance down instance=sim-1 reason="connection refused" engineLoad.running=3 engineLoad.waiting=0 ids=\\[1,2\\] empty="" eq="a=b"$`))
    expect(lines[1]).toMatch(new RegExp(`^${ISO} ERROR request failed err=boom$`))
    expect(lines[2]).toMatch(/^ {4}at /)
  })

  it("the picker's access line is condensed the same way", () => {
    const lines: string[] = []
    prettyLogger(lines).info({ requestId: 'r', method: 'POST', path: '/v1/completions', endpoint: 'default', instance: '10.0.0.7:8000', served: true, status: 200, ended: 'response', ms: 3.5 }, 'epp request')
    expect(lines[0]).toMatch(new RegExp(`^${ISO} INFO  epp request POST /v1/completions 200 10\\.0\\.0\\.7:8000 3\\.5ms requestId=r endpoint=default served=true ended=response$`))
  })

  it('gives back a line that is not a JSON object as it came', () => {
    expect(prettyLine('not json')).toBe('not json')
    expect(prettyLine('[1,2]')).toBe('[1,2]')
  })

  it('colours the level only when asked (a terminal)', () => {
    const line = JSON.stringify({ level: 40, time: 0, msg: 'm' })
    expect(prettyLine(line, true)).toBe('1970-01-01T00:00:00.000Z \x1b[33mWARN \x1b[39m m')
    expect(prettyLine(line, false)).toBe('1970-01-01T00:00:00.000Z WARN  m')
  })

  it('loses no line when the process exits at once (the batch under it is flushed)', () => {
    const script = `
import { pino } from 'pino'
import { logDestination } from './src/log/logger.ts'
import { prettyDestination } from './src/log/pretty-log.ts'
const log = pino({ level: 'info' }, prettyDestination(logDestination(), false))
for (let i = 0; i < 2000; i++) log.info({ i }, 'line')
process.exit(0)
`
    const r = spawnSync(process.execPath, ['--import', 'tsx', '--input-type=module', '-e', script], { cwd: root, encoding: 'utf8' })
    expect(r.status).toBe(0)
    const seen = r.stdout
      .trim()
      .split('\n')
      .map((l) => Number(/ line i=(\d+)$/.exec(l)![1]))
      .sort((a, b) => a - b)
    expect(seen).toEqual(Array.from({ length: 2000 }, (_, i) => i))
  })
})

describe('serve --log-format', () => {
  let fleet: SimFleet
  const children: ChildProcessWithoutNullStreams[] = []
  beforeAll(async () => {
    fleet = await startSimFleet({ instances: 2, profile: 'tiny' })
  })
  afterEach(() => endChildren(children))
  afterAll(() => fleet.close())

  /** serve on the fleet; resolves with its URL and its stdout so far, once it routes. */
  function serve(args: string[], env: NodeJS.ProcessEnv = {}): Promise<{ url: string; stdout: () => string }> {
    const child = spawn(process.execPath, [cli, 'serve', ...fleet.urls.flatMap((u) => ['--upstream', u]), '--port', '0', '--admin-port', '0', '--warmup-requests', '0', '--drain-delay-ms', '0', ...args], { env: { ...process.env, ...env } })
    children.push(child)
    let out = ''
    let err = ''
    child.stdout.on('data', (d: Buffer) => (out += d.toString()))
    return new Promise((resolve, reject) => {
      child.stderr.on('data', (d: Buffer) => {
        err += d.toString()
        const m = /on (http:\/\/[\d.:]+) \(admin/.exec(err)
        if (m) resolve({ url: m[1]!, stdout: () => out })
      })
      child.once('exit', (code) => reject(new Error(`serve exited with ${code}:\n${err}`)))
    })
  }

  const request = (url: string) => post(`${url}/v1/chat/completions`, chat('Pretty or not. '.repeat(20), { model: 'sim-tiny', max_tokens: 2 }))

  it('json by default: every line a JSON object, the request among them', async () => {
    const s = await serve([])
    expect((await request(s.url)).status).toBe(200)
    await until(() => s.stdout().includes('"msg":"request"'), 10_000, 'the access-log line')
    const lines = s.stdout().trim().split('\n')
    for (const l of lines) expect(() => JSON.parse(l), l).not.toThrow()
    expect(lines.map((l) => JSON.parse(l) as { msg: string; status?: number }).find((o) => o.msg === 'request')).toMatchObject({ method: 'POST', path: '/v1/chat/completions', status: 200 })
  })

  it('pretty (flag or variable): one readable line a record, the request condensed', async () => {
    for (const s of [await serve(['--log-format', 'pretty']), await serve([], { PREFIX_ROUTER_LOG_FORMAT: 'pretty' })]) {
      expect((await request(s.url)).status).toBe(200)
      await until(() => / request POST /.test(s.stdout()), 10_000, 'the access-log line')
      const lines = s.stdout().trim().split('\n')
      for (const l of lines) expect(() => JSON.parse(l), l).toThrow()
      const instance = fleet.urls.map((u) => u.replace(/[.]/g, '\\.')).join('|')
      expect(lines.find((l) => l.includes(' request '))).toMatch(new RegExp(`^${ISO} INFO  request POST /v1/chat/completions 200 (${instance}) [\\d.]+ms requestId=\\S+ endpoint=default model=sim-tiny strategy=longest_prefix `))
    }
  })

  it('refuses another format, naming the value', async () => {
    const r = spawnSync(process.execPath, [cli, 'serve', '--upstream', fleet.urls[0]!, '--log-format', 'xml'], { encoding: 'utf8' })
    expect(r.status).toBe(2)
    expect(r.stderr).toMatch(/log\.format: .*"json"\|"pretty".*got "xml" \(from --log-format\)/)
  })
})

describe('reload', () => {
  it('keeps the running format, saying a restart is needed for another', async () => {
    const router = await startRouter(['http://127.0.0.1:9'], { log: { level: 'silent', format: 'json' } })
    try {
      const next = { ...router.config, log: { ...router.config.log, format: 'pretty' as const, level: 'warn' as const } }
      expect(router.reload(next).restartRequired).toContain('log.format')
      expect(router.config.log).toMatchObject({ format: 'json', level: 'warn' })
      expect(router.reload(router.config).restartRequired).not.toContain('log.format')
    } finally {
      await router.close()
    }
  })
})
