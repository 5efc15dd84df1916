// serve whose stdout (or stderr) is a pipe nobody reads any more, as with `serve | head -3` or
// a log shipper that died: it keeps serving, drains on SIGTERM as usual and exits. Before, the
// logger's flush at exit retried the pipe's EPIPE forever (the process ignored every signal
// but SIGKILL), and a message to a closed stderr ended the router without a drain.
import { spawn, type ChildProcess } from 'node:child_process'
import { fileURLToPath } from 'node:url'
import { afterAll, afterEach, beforeAll, describe, expect, it } from 'vitest'
import { startSimFleet, type SimFleet } from '../../src/sim/index.js'
import { endChildren } from '../helpers/children.js'
import { freePort } from '../helpers/ports.js'
import { chat, post, until } from '../proxy/helpers.js'

const cli = fileURLToPath(new URL('../../dist/cli.js', import.meta.url))
let fleet: SimFleet
const children: ChildProcess[] = []

beforeAll(async () => {
  fleet = await startSimFleet({ instances: 2, profile: 'tiny' })
})
afterAll(async () => {
  await fleet.close()
})
afterEach(async () => {
  // A serve that hangs is ended by SIGKILL: a SIGTERM is what it ignored.
  await endChildren(children, 'SIGKILL')
})

interface Piped {
  serve: ChildProcess
  head: ChildProcess
  /** What head printed. */
  headOut: () => string
  /** serve's stderr, when it is not piped into head. */
  stderr: () => string
  exit: Promise<number | null>
}

/** `serve … | head -3`, or `serve … 2>&1 | head -3` with `both`. */
function pipeIntoHead(args: string[], both: boolean): Piped {
  const head = spawn('head', ['-3'], { stdio: ['pipe', 'pipe', 'ignore'] })
  const serve = spawn(process.execPath, [cli, 'serve', '--admin-port', '0', ...fleet.urls.flatMap((u) => ['--upstream', u]), ...args], {
    stdio: ['ignore', head.stdin, both ? head.stdin : 'pipe'],
  })
  // The parent's end of the pipe: with it closed, head's exit leaves serve writing to nobody.
  head.stdin.destroy()
  children.push(serve, head)
  let out = ''
  let err = ''
  head.stdout!.on('data', (d: Buffer) => (out += d.toString()))
  serve.stderr?.on('data', (d: Buffer) => (err += d.toString()))
  const exit = new Promise<number | null>((r) => serve.once('exit', (code) => r(code)))
  return { serve, head, headOut: () => out, stderr: () => err, exit }
}

const exited = (c: ChildProcess) => c.exitCode !== null || c.signalCode !== null

/** A streaming chat request that lasts about a second on the tiny profile; resolves with its whole body once the first bytes came. */
async function longStream(url: string): Promise<{ status: number; body: Promise<string> }> {
  const res = await fetch(`${url}/v1/chat/completions`, { method: 'POST', headers: { 'content-type': 'application/json' }, body: chat('tell a long story', { model: 'sim-tiny', max_tokens: 400, stream: true }) })
  const reader = res.body!.getReader()
  let text = new TextDecoder().decode((await reader.read()).value)
  const body = (async () => {
    for (;;) {
      const { done, value } = await reader.read()
      if (done) return text
      text += new TextDecoder().decode(value)
    }
  })()
  return { status: res.status, body }
}

describe('serve with a closed pipe for stdout', () => {
  it('`serve | head -3`, then SIGTERM: it drains and exits, saying once that its log lines go nowhere', async () => {
    const p = pipeIntoHead(['--port', '0', '--drain-delay-ms', '0'], false)
    await until(() => /on (http:\/\/[\d.:]+) \(admin/.test(p.stderr()) || exited(p.serve), 30_000, 'serve to listen')
    const url = /on (http:\/\/[\d.:]+) \(admin/.exec(p.stderr())![1]!
    // Each answered request is a log line on stdout; head ends after the third.
    for (let i = 0; !exited(p.head); i++) {
      expect((await post(`${url}/v1/chat/completions`, chat(`q${i}`, { model: 'sim-tiny', max_tokens: 2 }))).status).toBe(200)
      await new Promise((r) => setTimeout(r, 20))
    }
    expect(p.headOut().trim().split('\n')).toHaveLength(3)
    // Still serving, to nobody's stdout.
    expect((await post(`${url}/v1/chat/completions`, chat('after head', { model: 'sim-tiny', max_tokens: 2 }))).status).toBe(200)
    p.serve.kill('SIGTERM')
    // No time limit here: the test's own timeout is the bound. It used to hang until SIGKILL.
    expect(await p.exit).toBe(0)
    expect(p.stderr()).toContain('prefix-router: log lines are no longer written to stdout (EPIPE: its reader is gone); the router goes on without them')
    expect(p.stderr().match(/no longer written/g)).toHaveLength(1)
    expect(p.stderr()).toContain('prefix-router: stopped')
  })

  it('`serve 2>&1 | head -3`, then SIGTERM: a request in flight is finished and serve exits 0', async () => {
    const port = await freePort()
    const url = `http://127.0.0.1:${port}`
    const p = pipeIntoHead(['--port', String(port), '--drain-delay-ms', '0'], true)
    // The banner alone is more than three lines: head is gone before the first request.
    await until(async () => exited(p.serve) || (await fetch(`${url}/ping`).then((r) => r.ok, () => false)), 30_000, 'serve to listen')
    await new Promise<void>((r) => (exited(p.head) ? r() : p.head.once('exit', () => r())))
    expect(p.headOut().trim().split('\n')).toHaveLength(3)
    const stream = await longStream(url)
    expect(stream.status).toBe(200)
    // The drain's own messages go to the closed stderr: serve must not die of it.
    p.serve.kill('SIGTERM')
    const body = await stream.body
    expect(body.trimEnd().endsWith('data: [DONE]')).toBe(true)
    expect(body).not.toContain('"error"')
    expect(await p.exit).toBe(0)
  })
})
