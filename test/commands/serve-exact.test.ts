// serve's exact-view settings from the command line: what is wrong is named, in one line, exit 2.
import { spawnSync } from 'node:child_process'
import { mkdtempSync, rmSync, writeFileSync } from 'node:fs'
import { tmpdir } from 'node:os'
import { join } from 'node:path'
import { fileURLToPath } from 'node:url'
import { afterAll, describe, expect, it } from 'vitest'

const cli = fileURLToPath(new URL('../../dist/cli.js', import.meta.url))
const dir = mkdtempSync(join(tmpdir(), 'pr-serve-exact-'))
afterAll(() => rmSync(dir, { recursive: true, force: true }))

// The instance is never reached: every case fails before the fleet is probed or the port opens.
const base = ['serve', '--upstream', 'http://127.0.0.1:9', '--strategy', 'longest_prefix', '--port', '0', '--admin-port', '0', '--warmup-requests', '0']
const run = (args: string[]) => spawnSync(process.execPath, [cli, ...base, ...args], { encoding: 'utf8', timeout: 60_000 })

describe('serve --kv-events-port / --tokenizer errors', () => {
  it('a tokenizer file that does not load stops the start, naming the file', () => {
    writeFileSync(join(dir, 'tokenizer.json'), '{ not json')
    const r = run(['--kv-events-port', '+500', '--tokenizer', 'local', '--tokenizer-path', dir])
    expect(r.status).toBe(2)
    expect(r.stderr).toContain(join(dir, 'tokenizer.json'))
    expect(r.stderr).not.toMatch(/\n\s+at /) // no stack trace
    const missing = run(['--kv-events-port', '+500', '--tokenizer', 'local', '--tokenizer-path', join(dir, 'nope')])
    expect(missing.status).toBe(2)
    expect(missing.stderr).toContain(join(dir, 'nope'))
  })

  it('bad values name the flag and what was given', () => {
    const port = run(['--kv-events-port', 'x500'])
    expect(port.status).toBe(2)
    expect(port.stderr).toMatch(/kvEvents\.port: .*"x500" \(from --kv-events-port\)/)
    const mode = run(['--kv-events-port', '5557', '--tokenizer', 'guess'])
    expect(mode.status).toBe(2)
    expect(mode.stderr).toMatch(/tokenizer\.mode.*\(from --tokenizer\)/)
    const path = run(['--kv-events-port', '5557', '--tokenizer', 'local'])
    expect(path.status).toBe(2)
    expect(path.stderr).toMatch(/--tokenizer-path/)
    const ranks = run(['--kv-events-port', '5557', '--kv-events-dp-ranks', '0'])
    expect(ranks.status).toBe(2)
    expect(ranks.stderr).toMatch(/kvEvents\.dataParallelRanks.*--kv-events-dp-ranks/)
  })
})

describe('serve --workers 2 with --kv-events-port', () => {
  it('every worker follows the events and routes by them', async () => {
    const { spawn } = await import('node:child_process')
    const { startSimFleet } = await import('../../src/sim/index.js')
    const { chat, post } = await import('../proxy/helpers.js')
    const fleet = await startSimFleet({ instances: 4, profile: 'tiny', kvEvents: { port: 0 } })
    const config = join(dir, 'exact.json')
    // resyncMs short: a worker whose subscriber joined after an engine's first batch trusts its
    // view again soon (the test's documents come after that).
    writeFileSync(config, JSON.stringify({ kvEvents: { port: 5557, resyncMs: 200 }, endpoints: [{ name: 'default', instances: fleet.urls.map((url, i) => ({ url, kvEvents: { endpoint: fleet.kvEndpoints![i]! } })) }] }))
    const child = spawn(process.execPath, [cli, 'serve', '--config', config, '--strategy', 'longest_prefix', '--tokenizer', 'remote', '--tokenizer-timeout-ms', '5000', '--workers', '2', '--port', '0', '--admin-port', '0', '--warmup-requests', '0', '--debug-headers', '--log-level', 'warn', '--drain-delay-ms', '0'])
    try {
      let err = ''
      const [url, admin] = await new Promise<[string, string]>((resolve, reject) => {
        child.stderr.on('data', (d: Buffer) => {
          err += d.toString()
          const m = /on (http:\/\/[\d.:]+) \(admin (http:\/\/[\d.:]+)\)/.exec(err)
          if (m) resolve([m[1]!, m[2]!])
        })
        child.once('exit', (code) => reject(new Error(`serve exited with ${code}:\n${err}`)))
      })
      const held = async (body: string, instance: string) => {
        const r = await fetch(`${admin}/admin/route?endpoint=default`, { method: 'POST', body })
        const d = (await r.json()) as { blocks: number; instances: { instance: string; blocks: number; view: string }[] }
        const i = d.instances.find((x) => x.instance === instance)
        return i !== undefined && i.view === 'fresh' && i.blocks === d.blocks && d.blocks > 0
      }
      const routed: { ok: boolean; worker: string }[] = []
      for (let k = 0; k < 16; k++) {
        const j = k % 4
        // Held by instance j because a client sent it there directly, past the router.
        const body = chat(`Document ${k}. ${`Its own text, for many blocks of tokens, number ${k}. `.repeat(60)}`, { model: 'sim-tiny', max_tokens: 2 })
        expect((await post(`${fleet.urls[j]}/v1/chat/completions`, body)).status).toBe(200)
        for (let t = 0; t < 2000 && !(await held(body, fleet.urls[j]!)); t++) await new Promise((r) => setTimeout(r, 5))
        // A new connection each time, so the kernel deals the requests to both workers.
        const r = await post(`${url}/v1/chat/completions`, body, { connection: 'close' })
        expect(r.status).toBe(200)
        routed.push({ ok: r.headers.get('x-sim-instance') === `sim-${j}`, worker: r.headers.get('x-prefix-router-worker')! })
      }
      // The first documents may meet a worker still joining the streams; from the fifth on,
      // each is routed to the instance holding it, by both workers.
      const later = routed.slice(4)
      expect(later.filter((x) => !x.ok)).toEqual([])
      expect(new Set(later.map((x) => x.worker)).size).toBe(2)
    } finally {
      child.kill('SIGTERM')
      await new Promise((r) => child.once('exit', r))
      await fleet.close()
    }
  })
})
