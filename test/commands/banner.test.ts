// serve's start banner: what it says about each endpoint, and when it says it: once the
// router listens and before it serves a request, in one process and with --workers.
import { spawn, type ChildProcess } from 'node:child_process'
import { closeSync, mkdtempSync, openSync, readFileSync, rmSync, writeFileSync } from 'node:fs'
import http from 'node:http'
import { tmpdir } from 'node:os'
import { join } from 'node:path'
import { fileURLToPath } from 'node:url'
import { afterAll, afterEach, describe, expect, it } from 'vitest'
import { endChildren } from '../helpers/children.js'
import { freePort } from '../helpers/ports.js'
import { chat, startStub, until } from '../proxy/helpers.js'

const cli = fileURLToPath(new URL('../../dist/cli.js', import.meta.url))
const dir = mkdtempSync(join(tmpdir(), 'pr-banner-'))
const children: ChildProcess[] = []
afterEach(() => endChildren(children, 'SIGKILL'))
afterAll(() => rmSync(dir, { recursive: true, force: true }))

const env = () => Object.fromEntries(Object.entries(process.env).filter(([k]) => !k.startsWith('PREFIX_ROUTER_')))
const BANNER = /prefix-router: routing \d+ instance\(s\)/

/**
 * Starts serve with its stderr in a file: the child's writes to it are there the moment they
 * return, so the test can read what was written before any given moment.
 */
function serve(name: string, args: string[]): { errFile: string; child: ChildProcess } {
  const errFile = join(dir, `${name}.err`)
  const fd = openSync(errFile, 'w')
  const child = spawn(process.execPath, [cli, 'serve', '--host', '127.0.0.1', '--admin-port', '0', '--log-level', 'silent', '--drain-delay-ms', '0', ...args], { env: env(), stdio: ['ignore', 'ignore', fd] })
  closeSync(fd)
  children.push(child)
  return { errFile, child }
}

describe('the start banner', () => {
  it("names each endpoint's strategy when there are several", async () => {
    const a = await startStub('a')
    const b = await startStub('b')
    const file = join(dir, 'two.yaml')
    writeFileSync(
      file,
      `endpoints:\n  - { name: chat, instances: [${a.url}], routing: { strategy: random } }\n  - { name: batch, instances: [${a.url}, ${b.url}], routing: { strategy: least_outstanding_requests } }\n`,
    )
    const s = serve('two', ['--config', file, '--port', '0'])
    await until(() => BANNER.test(readFileSync(s.errFile, 'utf8')), 30_000, 'the banner')
    expect(readFileSync(s.errFile, 'utf8')).toMatch(
      /prefix-router: routing 3 instance\(s\) in 2 endpoints \(chat: 1 with random; batch: 2 with least_outstanding_requests\) on http:\/\/127\.0\.0\.1:\d+ \(admin /,
    )
    await a.close()
    await b.close()
  })

  for (const workers of [1, 2]) {
    it(`is written before the first request is served (--workers ${workers})`, async () => {
      let bannerFirst: boolean | undefined
      let errFile = ''
      const up = await startStub('up', (req, res) => {
        if (req.url === '/health') return void res.writeHead(200).end()
        // Probes of models and metrics: not requests a client sent.
        if (req.url !== '/v1/chat/completions') return void res.writeHead(404).end()
        // What serve had written when it sent its first request here.
        bannerFirst ??= BANNER.test(readFileSync(errFile, 'utf8'))
        res.writeHead(200, { 'content-type': 'application/json' }).end('{"choices":[]}')
      })
      const port = await freePort()
      const s = serve(`order-${workers}`, ['--upstream', up.url, '--port', String(port), '--workers', String(workers)])
      errFile = s.errFile
      // A client trying from before the port opens: its first request is served the moment it can be.
      const ask = () =>
        new Promise<number>((resolve) => {
          const req = http.request({ host: '127.0.0.1', port, path: '/v1/chat/completions', method: 'POST', headers: { 'content-type': 'application/json' } }, (res) => {
            res.resume()
            resolve(res.statusCode!)
          })
          req.on('error', () => resolve(0))
          req.end(chat('hello', { max_tokens: 1 }))
        })
      await until(async () => (await ask()) === 200 || s.child.exitCode !== null, 60_000, 'a request served')
      expect(s.child.exitCode).toBeNull()
      expect(bannerFirst).toBe(true)
      await up.close()
    }, 90_000)
  }
})

describe('the banner says the exact view and the sharing as they are', () => {
  // Until the tryIt lines: everything the banner says about the fleet.
  const bannerOf = async (errFile: string) => {
    await until(() => /\ntry:\n|no model known/.test(readFileSync(errFile, 'utf8')), 30_000, 'the banner')
    return readFileSync(errFile, 'utf8')
  }

  it('Redis down: not sharing yet, and why, rather than "sharing queued prefill through redis://"', async () => {
    const up = await startStub('up')
    const redis = `redis://127.0.0.1:${await freePort()}`
    const s = serve('redis-down', ['--upstream', up.url, '--port', '0', '--warmup-requests', '0', '--share-load', redis, '--replica-id', 'r1'])
    const text = await bannerOf(s.errFile)
    expect(text).not.toContain('sharing queued prefill with the other replicas')
    // Refused at once on loopback, or still connecting: either way said, never claimed.
    expect(text).toMatch(new RegExp(`NOT sharing queued prefill yet: Redis at ${redis} is not connected \\((still connecting|cannot reach it: .*ECONNREFUSED.*)\\); routing on this replica's own counts`))
    await up.close()
  })

  it('KV events: publishers reached out of all, the views trusted, the tokenizer in force, and each publisher not reached', async () => {
    const up = await startStub('up')
    const nobody = await freePort()
    const s = serve('kv-unreached', ['--upstream', up.url, '--port', '0', '--warmup-requests', '0', '--kv-events-port', String(nobody)])
    const text = await bannerOf(s.errFile)
    expect(text).toContain(
      "prefix-router: exact view (KV events): 0 of 1 publishers reached, 0 of 1 views trusted; tokenizer remote (the default: each request's token ids from an instance's POST /tokenize",
    )
    expect(text).toContain(`  ${up.url}: publisher tcp://127.0.0.1:${nobody} not reached yet (ZeroMQ retries; a warning follows if it is still not reached 5000 ms after subscribing)`)
    await up.close()
  })

  it('a tokenizer without KV events is said to be unused', async () => {
    const up = await startStub('up')
    const s = serve('tokenizer-alone', ['--upstream', up.url, '--port', '0', '--warmup-requests', '0', '--tokenizer', 'bytes'])
    const text = await bannerOf(s.errFile)
    expect(text).toContain('prefix-router: warning: --tokenizer bytes (tokenizer) serves the exact view only, and without --kv-events-port (kvEvents) there is none: it is not used\n')
    expect(text).not.toContain('exact view (KV events)')
    await up.close()
  })

  it('a strategy that does not route by the view, and a tokenizer given, are said too', async () => {
    const up = await startStub('up')
    const nobody = await freePort()
    const s = serve('kv-readonly', ['--upstream', up.url, '--port', '0', '--warmup-requests', '0', '--kv-events-port', String(nobody), '--strategy', 'random', '--tokenizer', 'bytes'])
    const text = await bannerOf(s.errFile)
    expect(text).toContain('prefix-router: exact view (KV events) (read only: random does not route by it): 0 of 1 publishers reached, 0 of 1 views trusted; tokenizer bytes\n')
    await up.close()
  })
})
