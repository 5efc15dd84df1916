// `prefix-router sim --role prefill|decode` as a user runs it: two CLI processes, the
// prefill leg sent to one and the decode leg (with the returned kv_transfer_params) to the
// other, the KV read across processes over the prefill's side channel.
import { spawn, spawnSync, type ChildProcess } from 'node:child_process'
import net from 'node:net'
import { fileURLToPath } from 'node:url'
import { afterEach, describe, expect, it } from 'vitest'
import { endChildren } from '../helpers/children.js'
import { get, post, promptOf } from './helpers.js'

const cli = fileURLToPath(new URL('../../dist/cli.js', import.meta.url))

const children: ChildProcess[] = []
afterEach(async () => {
  await endChildren(children.splice(0))
})

/** Starts `sim` with `args`; resolves with its worker URLs and what it printed on stderr. */
async function sim(args: string[], instances: number): Promise<{ urls: string[]; stderr: () => string }> {
  const child = spawn(process.execPath, [cli, 'sim', '--instances', String(instances), '--port', '0', '--profile', 'tiny', ...args], {
    stdio: ['ignore', 'pipe', 'pipe'],
  })
  children.push(child)
  let err = ''
  child.stderr.on('data', (d: Buffer) => (err += d.toString()))
  const urls = await new Promise<string[]>((resolve, reject) => {
    let out = ''
    child.stdout.on('data', (d: Buffer) => {
      out += d.toString()
      const lines = out.split('\n').filter((l) => l.startsWith('http://'))
      if (lines.length === instances) resolve(lines)
    })
    child.once('exit', (code) => reject(new Error(`sim exited early with ${code}: ${err}`)))
  })
  return { urls, stderr: () => err }
}

describe('prefix-router sim --role', () => {
  it('a prefill process and a decode process serve the two legs of one request', async () => {
    const p = await sim(['--role', 'prefill', '--bootstrap-port', '0'], 2)
    const d = await sim(['--role', 'decode'], 2)
    expect(p.stderr()).toMatch(/2 prefill worker\(s\)/)
    expect(p.stderr()).toMatch(/KV side channels on ports \d+, \d+; SGLang bootstrap on ports \d+, \d+/)
    expect(d.stderr()).not.toMatch(/SGLang bootstrap/)
    const body = { messages: [{ role: 'user', content: promptOf(400, 'cli') }], max_tokens: 5 }
    const kvp = { do_remote_decode: true, do_remote_prefill: false, remote_engine_id: null, remote_block_ids: null, remote_host: null, remote_port: null }
    const pre = await post(p.urls[1]!, '/v1/chat/completions', { ...body, max_tokens: 1, min_tokens: 1, stream: false, kv_transfer_params: kvp })
    expect(pre.status).toBe(200)
    expect(pre.headers.get('x-sim-instance')).toBe('prefill-1')
    const dec = await post(d.urls[0]!, '/v1/chat/completions', { ...body, kv_transfer_params: pre.body.kv_transfer_params })
    expect(dec.status).toBe(200)
    expect(dec.headers.get('x-sim-instance')).toBe('decode-0')
    expect(dec.body.usage.prompt_tokens_details.cached_tokens).toBe(dec.body.usage.prompt_tokens)
    const ds = JSON.parse((await get(d.urls[0]!, '/sim/state')).text)
    expect(ds.role).toBe('decode')
    expect(ds.prompt_tokens_computed).toBe(1)
    expect(ds.kv_transfer.transfers).toBe(1)
    const ps = JSON.parse((await get(p.urls[1]!, '/sim/state')).text)
    expect(ps.kv_transfer.holds_read).toBe(1)
    expect(ps.kv_transfer.held_blocks).toBe(0)
  })

  it('rejects bad disaggregation flags with one line naming the value, exit 2', () => {
    const cases: [string[], RegExp][] = [
      [['--role', 'router'], /--role must be one of prefill, decode, both; got 'router'/],
      [['--kv-load-failure-policy', 'retry'], /--kv-load-failure-policy must be one of fail, recompute; got 'retry'/],
      [['--kv-lease-ms', '0'], /--kv-lease-ms must be an integer from 1 to 3600000; got '0'/],
      [['--kv-link-gb-per-sec', 'fast'], /--kv-link-gb-per-sec must be a number from 0.001 to 100000; got 'fast'/],
      [['--role', 'decode', '--bootstrap-port', '9000'], /--bootstrap-port is for --role prefill or both/],
      [['--port', '18000', '--instances', '2', '--side-channel-port', '18001'], /--side-channel-port 18001..18002 and --port 18000..18001 both take port 18001/],
      [['--role', 'prefill', '--port', '8998'], /--bootstrap-port 8998..8998 and --port 8998..8998 both take port 8998/],
    ]
    for (const [args, re] of cases) {
      const r = spawnSync(process.execPath, [cli, 'sim', ...args], { encoding: 'utf8' })
      expect(r.status).toBe(2)
      expect(r.stderr).toMatch(re)
      expect(r.stderr.trim().split('\n')).toHaveLength(1)
    }
  })

  it('names the flag whose port is taken, exit 1', async () => {
    const taken = net.createServer()
    await new Promise<void>((r) => taken.listen(0, '127.0.0.1', r))
    const port = (taken.address() as net.AddressInfo).port
    try {
      const r = await new Promise<{ code: number | null; stderr: string }>((resolve) => {
        const c = spawn(process.execPath, [cli, 'sim', '--role', 'prefill', '--port', '0', '--profile', 'tiny', '--bootstrap-port', String(port)])
        children.push(c)
        let err = ''
        c.stderr.on('data', (d: Buffer) => (err += d.toString()))
        c.once('exit', (code) => resolve({ code, stderr: err }))
      })
      expect(r.code).toBe(1)
      expect(r.stderr).toMatch(new RegExp(`cannot listen on port ${port} \\(--bootstrap-port\\): .*EADDRINUSE`))
    } finally {
      taken.close()
    }
  })
})
