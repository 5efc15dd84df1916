// A throwaway redis-server for the benchmarks that share load through one: on a free loopback
// port, nothing saved, ready once it answers PING; and one command over a raw socket.
import { spawn } from 'node:child_process'
import net from 'node:net'

const sleep = (ms: number) => new Promise((r) => setTimeout(r, ms))

export async function freePort(): Promise<number> {
  const s = net.createServer()
  await new Promise<void>((r) => s.listen(0, '127.0.0.1', r))
  const port = (s.address() as net.AddressInfo).port
  await new Promise<void>((r) => s.close(() => r()))
  return port
}

/** One command to Redis over a raw socket (RESP inline), its reply as text. */
export function redisCommand(port: number, line: string): Promise<string> {
  return new Promise((resolve, reject) => {
    const c = net.connect(port, '127.0.0.1')
    let out = ''
    c.once('error', reject)
    c.on('connect', () => c.write(`${line}\r\n`))
    c.on('data', (d) => {
      out += d.toString()
      // A bulk reply: $len\r\n…\r\n; a status reply: +…\r\n.
      const m = /^\$(\d+)\r\n/.exec(out)
      if ((m && out.length >= m[0].length + Number(m[1]) + 2) || (/^[+-]/.test(out) && out.endsWith('\r\n'))) {
        c.destroy()
        resolve(out)
      }
    })
  })
}

/** Starts redis-server and resolves once it answers; exits the benchmark, saying how to install it, when there is none. */
export async function startRedisServer(): Promise<{ port: number; url: string; stop(): void }> {
  const port = await freePort()
  const redis = spawn('redis-server', ['--port', String(port), '--bind', '127.0.0.1', '--save', '', '--appendonly', 'no'], { stdio: 'ignore' })
  redis.once('error', (e) => {
    console.error(`redis-server: ${e.message} (install it: apt-get install redis-server)`)
    process.exit(1)
  })
  for (let i = 0; ; i++) {
    if ((await redisCommand(port, 'PING').catch(() => '')).startsWith('+PONG')) break
    if (i > 200) throw new Error('redis-server did not answer')
    await sleep(25)
  }
  return { port, url: `redis://127.0.0.1:${port}`, stop: () => void redis.kill() }
}
