// `serve --workers N` against one process: the highest rate each sustains in front of the same
// fast stub upstream, closed loop, in rounds taken in rotation so that both see the same
// machine. The stub and the load generator share the machine with the router, so on a small
// machine they cap what any number of workers can show: the direct row is that ceiling.
// Run: npm run build:ts && npx tsx bench/cluster.bench.ts
//   (WORKERS=4 to compare another count; ROUNDS=5 SECONDS=3 CONCURRENCY=128 to change the load)
import { spawn, type ChildProcess } from 'node:child_process'
import { availableParallelism, cpus } from 'node:os'
import { fileURLToPath } from 'node:url'
import { Pool } from 'undici'

const WORKERS = Number(process.env.WORKERS ?? Math.max(2, availableParallelism()))
const ROUNDS = Number(process.env.ROUNDS ?? 5)
const SECONDS = Number(process.env.SECONDS ?? 3)
const CONCURRENCY = Number(process.env.CONCURRENCY ?? 128)
const WARMUP_S = 3
const root = fileURLToPath(new URL('..', import.meta.url))
const children: ChildProcess[] = []

function start(cmd: string[], ready: RegExp, stream: 'stdout' | 'stderr'): Promise<RegExpExecArray> {
  const child = spawn(process.execPath, cmd, { cwd: root, stdio: ['ignore', 'pipe', 'pipe'] })
  children.push(child)
  let out = ''
  return new Promise((resolve, reject) => {
    child[stream]!.on('data', (d: Buffer) => {
      out += d.toString()
      const m = ready.exec(out)
      if (m) resolve(m)
    })
    child.once('exit', (c) => reject(new Error(`${cmd.join(' ')} exited ${c}: ${out}`)))
  })
}

// A 2 KiB chat body, each with its own prefix, so requests spread over the ring.
const body = (i: number) =>
  JSON.stringify({ model: 'stub', messages: [{ role: 'system', content: `tenant ${i % 64}: ${'policy text. '.repeat(150)}` }, { role: 'user', content: 'hi' }], max_tokens: 8 })

/** Closed loop, `CONCURRENCY` outstanding on as many connections (each worker gets its share): requests per second. */
async function rate(url: string, seconds: number): Promise<number> {
  const client = new Pool(url, { connections: CONCURRENCY, pipelining: 1, keepAliveTimeout: 60_000 })
  const end = Date.now() + seconds * 1000
  let done = 0
  let errors = 0
  await Promise.all(
    Array.from({ length: CONCURRENCY }, async (_, k) => {
      for (let i = k; Date.now() < end; i += CONCURRENCY) {
        const res = await client.request({ path: '/v1/chat/completions', method: 'POST', body: body(i), headers: { 'content-type': 'application/json' } })
        await res.body.dump()
        if (res.statusCode === 200) done++
        else errors++
      }
    }),
  )
  await client.close()
  if (errors > 0) throw new Error(`${errors} requests to ${url} failed`)
  return done / seconds
}

const median = (xs: number[]) => [...xs].sort((a, b) => a - b)[Math.floor(xs.length / 2)]!
const fmt = (v: number) => Math.round(v).toLocaleString('en-US')

async function main(): Promise<void> {
  const [, stubPort] = await start(['bench/stub-upstream.mjs'], /listening (\d+)/, 'stdout')
  const upstream = `http://127.0.0.1:${stubPort}`
  const serve = async (n: number) =>
    (await start(['--initial-old-space-size=128', 'dist/cli.js', 'serve', '--workers', String(n), '--upstream', upstream, '--host', '127.0.0.1', '--port', '0', '--admin-port', '0', '--log-level', 'warn'], /on (http:\/\/[\d.:]+) \(admin/, 'stderr'))[1]!
  const paths: [string, string][] = [
    ['direct (stub only)', upstream],
    ['--workers 1', await serve(1)],
    [`--workers ${WORKERS}`, await serve(WORKERS)],
  ]
  const cpu = cpus()[0]
  console.log(`prefix-router serve --workers — node ${process.version}; ${cpu?.model ?? 'unknown CPU'}, ${cpus().length} CPUs, ${availableParallelism()} available to this process`)
  console.log(`closed loop, ${CONCURRENCY} outstanding on ${CONCURRENCY} connections, 2 KiB chat bodies; ${WARMUP_S} s warm-up per path (discarded), then ${ROUNDS} rounds of ${SECONDS} s in rotation`)
  console.log('stub, routers and this load generator all run on this machine\n')
  for (const [, url] of paths) await rate(url, WARMUP_S)
  const samples = new Map<string, number[]>(paths.map(([name]) => [name, []]))
  for (let r = 0; r < ROUNDS; r++) for (const [name, url] of paths) samples.get(name)!.push(await rate(url, SECONDS))
  const base = median(samples.get('--workers 1')!)
  for (const [name] of paths) {
    const xs = samples.get(name)!
    console.log(`${name.padEnd(20)} median ${fmt(median(xs)).padStart(7)} req/s  (rounds ${xs.map(fmt).join(', ')})  ${(median(xs) / base).toFixed(2)}× of --workers 1`)
  }
}

main()
  .catch((err: unknown) => {
    console.error(err)
    process.exitCode = 1
  })
  .finally(async () => {
    // Routers get two signals (drain, then now), so that they remove their shared state files.
    for (const c of children) c.kill('SIGTERM')
    await new Promise((r) => setTimeout(r, 500))
    for (const c of children) if (c.exitCode === null) c.kill('SIGTERM')
  })
