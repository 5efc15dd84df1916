// serve's stdout log lines are written in batches: none may be lost when the process ends,
// however it ends short of SIGKILL, and a quiet server's line still comes out on its own.
import { spawn, spawnSync } from 'node:child_process'
import { fileURLToPath } from 'node:url'
import { describe, expect, it } from 'vitest'
import { MAX_PENDING_BYTES } from '../../src/log/batched-log.js'
import { until } from '../proxy/helpers.js'

const root = fileURLToPath(new URL('../..', import.meta.url))

/** A child that logs `n` lines through logDestination(), then runs `then`. */
const script = (n: number, then: string) => `
import { pino } from 'pino'
import { logDestination } from './src/log/logger.ts'
const log = pino({ level: 'info' }, logDestination())
for (let i = 0; i < ${n}; i++) log.info({ i, requestId: 'r' + i }, 'request')
${then}
`

function run(n: number, then: string) {
  return spawnSync(process.execPath, ['--import', 'tsx', '--input-type=module', '-e', script(n, then)], { cwd: root, encoding: 'utf8' })
}

// Sorted: a batch in flight when the process exits may land after the last lines, which are
// written synchronously on the way out; what must hold is that none is lost or written twice.
const indexes = (stdout: string) =>
  stdout
    .trim()
    .split('\n')
    .map((l) => (JSON.parse(l) as { i: number }).i)
    .sort((a, b) => a - b)

describe('log destination', () => {
  it('writes every line when the process exits at once', () => {
    const r = run(2000, 'process.exit(0)')
    expect(r.status).toBe(0)
    expect(indexes(r.stdout)).toEqual(Array.from({ length: 2000 }, (_, i) => i))
  })

  it('writes every line when the process dies of an uncaught exception', () => {
    const r = run(50, "throw new Error('boom')")
    expect(r.status).not.toBe(0)
    expect(indexes(r.stdout)).toEqual(Array.from({ length: 50 }, (_, i) => i))
  })

  it('a process whose stdout is a closed pipe exits: its lines are dropped, and stderr says so once', async () => {
    // One line, smaller than a batch: it is still waiting when the process exits, and the
    // flush at exit is the first write to meet the closed pipe (it used to retry forever).
    const c = spawn(process.execPath, ['--import', 'tsx', '--input-type=module', '-e', script(1, 'process.exit(0)')], { cwd: root, stdio: ['ignore', 'pipe', 'pipe'] })
    c.stdout.destroy()
    let err = ''
    c.stderr.on('data', (d: Buffer) => (err += d.toString()))
    const code = await new Promise((r) => c.once('exit', r))
    expect(code).toBe(0)
    expect(err).toBe('prefix-router: log lines are no longer written to stdout (EPIPE: its reader is gone); the router goes on without them\n')
  })

  it(`keeps at most ${MAX_PENDING_BYTES >> 20} MiB for a reader that stopped reading, and counts what it drops`, async () => {
    // 24 MiB of lines into a pipe nobody reads; then the reader comes back.
    const lines = 24 * 1024
    const pad = 'x'.repeat(1000)
    const child = `
import { pino } from 'pino'
import { logDestination } from './src/log/logger.ts'
const log = pino({ level: 'info' }, logDestination())
for (let i = 0; i < ${lines}; i++) log.info({ i, pad: '${pad}' }, 'request')
process.stdin.resume()
`
    const c = spawn(process.execPath, ['--import', 'tsx', '--input-type=module', '-e', child], { cwd: root })
    let err = ''
    c.stderr.on('data', (d: Buffer) => (err += d.toString()))
    await until(() => err.includes('takes no more log lines'), 30_000, 'the drop to be reported')
    expect(err).toBe(`prefix-router: stdout takes no more log lines (${MAX_PENDING_BYTES >> 20} MiB wait to be read); further lines are dropped until it does\n`)
    let got = 0
    c.stdout.on('data', (d: Buffer) => (got += d.toString().split('\n').length - 1))
    await until(() => /were dropped/.test(err), 30_000, 'the reader to be taken back')
    const dropped = Number(/; (\d+) were dropped while it did not/.exec(err)![1])
    expect(dropped).toBeGreaterThan(0)
    // Every line was either written or counted as dropped.
    await until(() => got + dropped === lines, 30_000, 'every line kept to be written')
    c.stdin.end()
    await new Promise((r) => c.once('exit', r))
  })

  it('writes a line smaller than a batch while the process keeps running', async () => {
    // The child logs one line and stays up until its stdin closes: the line must come unasked.
    const c = spawn(process.execPath, ['--import', 'tsx', '--input-type=module', '-e', script(1, 'process.stdin.resume()')], { cwd: root })
    let out = ''
    const line = await new Promise<string>((resolve) => {
      c.stdout.on('data', (d: Buffer) => {
        out += d.toString()
        if (out.includes('\n')) resolve(out)
      })
    })
    c.stdin.end()
    c.kill('SIGTERM')
    expect(indexes(line)).toEqual([0])
  })
})
