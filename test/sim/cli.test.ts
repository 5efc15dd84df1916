// `prefix-router sim` as a user runs it: the built CLI in a child process.
import { spawn, spawnSync } from 'node:child_process'
import { fileURLToPath } from 'node:url'
import { describe, expect, it } from 'vitest'
import { metric, parsePrometheus, post } from './helpers.js'

const cli = fileURLToPath(new URL('../../dist/cli.js', import.meta.url))

describe('prefix-router sim', () => {
  it('prints worker URLs, serves them, and exits 0 on SIGTERM', async () => {
    const child = spawn(process.execPath, [cli, 'sim', '--instances', '2', '--port', '0', '--profile', 'tiny', '--lora', 'l1=/p'], {
      stdio: ['ignore', 'pipe', 'pipe'],
    })
    try {
      let out = ''
      const urls = await new Promise<string[]>((resolve, reject) => {
        child.stdout.on('data', (d: Buffer) => {
          out += d.toString()
          const lines = out.split('\n').filter((l) => l.startsWith('http://'))
          if (lines.length === 2) resolve(lines)
        })
        child.once('exit', (code) => reject(new Error(`exited early with ${code}`)))
      })
      expect(urls.every((u) => u.startsWith('http://127.0.0.1:'))).toBe(true)
      const r = await post(urls[1]!, '/v1/chat/completions', { model: 'l1', messages: [{ role: 'user', content: 'hi' }], max_tokens: 2 })
      expect(r.status).toBe(200)
      expect(r.headers.get('x-sim-instance')).toBe('sim-1')
      const m = parsePrometheus(await (await fetch(`${urls[1]}/metrics`)).text())
      expect(metric(m, 'vllm:generation_tokens_total')).toBe(2)
      const exited = new Promise<number | null>((resolve) => child.once('exit', (code) => resolve(code)))
      child.kill('SIGTERM')
      expect(await exited).toBe(0)
    } finally {
      if (child.exitCode === null) child.kill('SIGKILL')
    }
  })

  it('--api-key guards /v1/* as vLLM does; /health stays open', async () => {
    const child = spawn(process.execPath, [cli, 'sim', '--port', '0', '--profile', 'tiny', '--api-key', 'sk-cli'], { stdio: ['ignore', 'pipe', 'pipe'] })
    try {
      const url = await new Promise<string>((resolve, reject) => {
        let out = ''
        child.stdout.on('data', (d: Buffer) => {
          out += d.toString()
          const line = out.split('\n').find((l) => l.startsWith('http://'))
          if (line) resolve(line)
        })
        child.once('exit', (code) => reject(new Error(`exited early with ${code}`)))
      })
      const refused = await fetch(`${url}/v1/models`)
      expect([refused.status, await refused.text()]).toEqual([401, '{"error":"Unauthorized"}'])
      expect((await fetch(`${url}/v1/models`, { headers: { authorization: 'Bearer sk-cli' } })).status).toBe(200)
      expect((await fetch(`${url}/health`)).status).toBe(200)
    } finally {
      child.kill('SIGKILL')
    }
  })

  it('rejects bad flags with one line naming the flag and its range, exit 2', () => {
    const cases: [string[], RegExp][] = [
      [['--kv-blocks', '3'], /--kv-blocks must be an integer from 16 to 50000000; got '3'/],
      [['--time-scale', '0'], /--time-scale must be a number from 0.001 to 100000; got '0'/],
      [['--instances', 'many'], /--instances must be an integer from 1 to 1024; got 'many'/],
      [['--profile', 'gpt'], /--profile must be one of llama-3.1-70b-p5, tiny; got 'gpt'/],
      [['--fault-error-rate', '1.5'], /--fault-error-rate must be a number from 0 to 1; got '1.5'/],
      [['--fault-instances', '7', '--instances', '2'], /--fault-instances must list worker indexes from 0 to 1/],
      [['--api-key', ' '], /--api-key must be a non-empty key/],
    ]
    for (const [args, re] of cases) {
      const r = spawnSync(process.execPath, [cli, 'sim', ...args], { encoding: 'utf8' })
      expect(r.status).toBe(2)
      expect(r.stderr).toMatch(re)
      expect(r.stderr.trim().split('\n')).toHaveLength(1)
    }
  })
})
