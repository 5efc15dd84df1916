// A real redis-server for the share-load tests, on a free loopback port, with nothing saved:
// started by the test, killed (SIGKILL, as a crash) or stopped by it, and restartable on the
// same port. Without redis-server the tests fail saying how to install it: CI installs it.
import { spawn, type ChildProcess } from 'node:child_process'
import net from 'node:net'
import { freePort } from '../../helpers/ports.js'

export interface RedisServer {
  port: number
  url: string
  /** SIGKILL: the server vanishes as a crashed one would, connections reset. */
  kill(): Promise<void>
  /** Starts it again on the same port (after kill). */
  restart(): Promise<void>
  stop(): Promise<void>
}

export const NO_REDIS = 'redis-server is not installed: the share-load tests need it (Debian: apt-get install redis-server; .ci/run installs it)'

/** Resolves once the server answers PING. */
async function answers(port: number, timeoutMs: number): Promise<void> {
  const end = Date.now() + timeoutMs
  for (;;) {
    const ok = await new Promise<boolean>((resolve) => {
      const c = net.connect(port, '127.0.0.1')
      c.once('error', () => resolve(false))
      c.once('connect', () => c.write('PING\r\n'))
      c.once('data', (d) => {
        c.destroy()
        resolve(d.toString().startsWith('+PONG'))
      })
    })
    if (ok) return
    if (Date.now() > end) throw new Error(`redis-server on port ${port} did not answer PING in ${timeoutMs} ms`)
    await new Promise((r) => setTimeout(r, 20))
  }
}

function launch(port: number): Promise<ChildProcess> {
  return new Promise((resolve, reject) => {
    const child = spawn('redis-server', ['--port', String(port), '--bind', '127.0.0.1', '--save', '', '--appendonly', 'no'], { stdio: 'ignore' })
    child.once('error', (err: NodeJS.ErrnoException) => reject(err.code === 'ENOENT' ? new Error(NO_REDIS) : err))
    child.once('spawn', () => resolve(child))
  })
}

export async function startRedis(): Promise<RedisServer> {
  const port = await freePort()
  let child = await launch(port)
  await answers(port, 10_000)
  // A test process that ends before its afterAll (a timeout, a crash) leaves no server behind.
  const orphan = () => child.kill('SIGKILL')
  process.once('exit', orphan)
  const exited = (c: ChildProcess) => (c.exitCode !== null || c.signalCode !== null ? Promise.resolve() : new Promise<void>((r) => c.once('exit', () => r())))
  const end = async (signal: NodeJS.Signals) => {
    const gone = exited(child)
    child.kill(signal)
    await gone
  }
  return {
    port,
    url: `redis://127.0.0.1:${port}`,
    kill: () => end('SIGKILL'),
    async restart() {
      child = await launch(port)
      await answers(port, 10_000)
    },
    async stop() {
      process.off('exit', orphan)
      await end('SIGTERM')
    },
  }
}
