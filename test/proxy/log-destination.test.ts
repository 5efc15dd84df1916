// serve's stdout log lines are written in batches: none may be lost when the process ends,
// however it ends short of SIGKILL, and a quiet server's line still comes out on its own.
import { spawn, spawnSync } from 'node:child_process'
import { fileURLToPath } from 'node:url'
import { describe, expect, it } from 'vitest'

const root = fileURLToPath(new URL('../..', import.meta.url))

/** A child that logs `n` lines through logDestination(), then runs `then`. */
const script = (n: number, then: string) => `
import { pino } from 'pino'
import { logDestination } from './src/proxy/access-log.ts'
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
