// Router overhead: the same open-loop load sent straight to a fast stub upstream and through
// `prefix-router serve` in front of it, side by side in one run. Requests are paced by timers
// on a fixed schedule whatever the responses do (open loop); latency runs from the actual
// send to the first and to the last response byte, in HDR histograms. (Measuring from the
// schedule would add the timers' ~1 ms resolution to both paths; how late sends ran is
// printed so a saturated generator shows.) Then the highest rate each path sustains (closed loop), and the routing
// decision alone, in process. Each process (stub, router, load) is separate. On the HTTP/1.1
// rows the same load also goes through peers (bench/peers/): a minimal Node proxy, the floor
// for anything built on Node's HTTP stack, and HAProxy and nginx when installed.
// Run: npm run bench:proxy   (RATE=1000 DURATION_S=5 ROUNDS=5 to change the open-loop load:
// DURATION_S seconds per path and row, taken in ROUNDS turns in rotation)
import { spawn, type ChildProcess } from 'node:child_process'
import http2 from 'node:http2'
import { fileURLToPath } from 'node:url'
import * as hdr from 'hdr-histogram-js'
import { Client } from 'undici'
import { openAIRequest } from '../src/core/key/openai-key.js'
import { Router } from '../src/core/router.js'
import { startCProxies } from './peers/c-proxies.js'

const RATE = Number(process.env.RATE ?? 1000)
const DURATION_S = Number(process.env.DURATION_S ?? 5)
const ROUNDS = Number(process.env.ROUNDS ?? 5)
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

const histogram = () => hdr.build({ lowestDiscernibleValue: 1, highestTrackableValue: 60_000_000, numberOfSignificantValueDigits: 3 })

// An 8 KiB chat body: a long shared system prompt and a short question.
function body(i: number, stream: boolean): string {
  const system = 'You are the support assistant of a large retailer; answer from the policy below. '.repeat(96).slice(0, 7900)
  return JSON.stringify({ model: 'stub', messages: [{ role: 'system', content: system }, { role: 'user', content: `question ${i}` }], max_tokens: 8, stream })
}

interface Sender { send(b: string): Promise<{ first: bigint; last: bigint }>; close(): Promise<void> }

function h1Sender(url: string): Sender {
  const client = new Client(url, { connections: 64, pipelining: 1, keepAliveTimeout: 60_000 } as never)
  return {
    async send(b) {
      const res = await client.request({ path: '/v1/chat/completions', method: 'POST', body: b, headers: { 'content-type': 'application/json' } })
      let first = 0n
      for await (const _ of res.body) if (first === 0n) first = process.hrtime.bigint()
      return { first, last: process.hrtime.bigint() }
    },
    close: () => client.close(),
  }
}

function h2Sender(url: string): Sender {
  const session = http2.connect(url)
  return {
    send(b) {
      return new Promise((resolve, reject) => {
        const s = session.request({ ':method': 'POST', ':path': '/v1/chat/completions', 'content-type': 'application/json' })
        let first = 0n
        s.on('data', () => {
          if (first === 0n) first = process.hrtime.bigint()
        })
        s.on('end', () => resolve({ first, last: process.hrtime.bigint() }))
        s.on('error', reject)
        s.end(b)
      })
    },
    close: async () => {
      session.close()
    },
  }
}

interface Sample {
  ttfb: hdr.Histogram
  total: hdr.Histogram
  lag: hdr.Histogram // how late each send was against the schedule (timer resolution)
  errors: number
}

const sample = (): Sample => ({ ttfb: histogram(), total: histogram(), lag: histogram(), errors: 0 })

/** Warms up a sender's connections and the JIT before it is measured. */
async function warm(sender: Sender, stream: boolean): Promise<void> {
  await Promise.all(Array.from({ length: 200 }, (_, i) => sender.send(body(i % 64, stream))))
}

/** Open loop at RATE for `seconds`, into `into`: latency from the actual send. */
async function openLoop(sender: Sender, stream: boolean, seconds: number, into: Sample): Promise<void> {
  const { ttfb, total, lag } = into
  const n = Math.round(RATE * seconds)
  const bodies = Array.from({ length: 64 }, (_, i) => body(i, stream))
  const t0 = process.hrtime.bigint() + 10_000_000n
  const interval = BigInt(Math.round(1e9 / RATE))
  const pending: Promise<void>[] = []
  let i = 0
  // Each timer tick sends every request that has come due, so responses are read in between
  // and a late send still counts from its scheduled time. Timers, not setImmediate: a
  // spinning load generator would take a core from the router and the stub it measures.
  await new Promise<void>((resolve) => {
    const tick = () => {
      const now = process.hrtime.bigint()
      while (i < n && t0 + BigInt(i) * interval <= now) {
        const due = t0 + BigInt(i) * interval
        const sent = process.hrtime.bigint()
        lag.recordValue(Math.max(1, Number(sent - due) / 1000))
        pending.push(
          sender.send(bodies[i % 64]!).then(
            (r) => {
              ttfb.recordValue(Math.max(1, Number(r.first - sent) / 1000))
              total.recordValue(Math.max(1, Number(r.last - sent) / 1000))
            },
            () => void into.errors++,
          ),
        )
        i++
      }
      if (i < n) setTimeout(tick, Math.max(0, Number(t0 + BigInt(i) * interval - process.hrtime.bigint()) / 1e6))
      else resolve()
    }
    tick()
  })
  await Promise.all(pending)
}

/**
 * The same load through every path, in ROUNDS short turns taken in rotation, so that the noise
 * of this shared machine (other tenants, GC, CPU frequency) falls on every path alike.
 */
async function compare(paths: [string, Sender][], stream: boolean): Promise<Record<string, Sample>> {
  const out: Record<string, Sample> = {}
  for (const [name, sender] of paths) {
    await warm(sender, stream)
    out[name] = sample()
  }
  for (let r = 0; r < ROUNDS; r++) for (const [name, sender] of paths) await openLoop(sender, stream, DURATION_S / ROUNDS, out[name]!)
  return out
}

/** Closed loop with `concurrency` outstanding requests for `seconds`: requests per second. */
async function maxRate(sender: Sender, concurrency: number, seconds: number): Promise<number> {
  const b = body(0, false)
  const end = Date.now() + seconds * 1000
  let done = 0
  await Promise.all(
    Array.from({ length: concurrency }, async () => {
      while (Date.now() < end) {
        await sender.send(b)
        done++
      }
    }),
  )
  return done / seconds
}

const us = (v: number) => (v >= 1000 ? `${(v / 1000).toFixed(2)} ms` : `${v.toFixed(0)} µs`)
const pad = (s: string, n: number) => s.padEnd(n)

async function main(): Promise<void> {
  const [, stubPort] = await start(['bench/stub-upstream.mjs'], /listening (\d+)/, 'stdout')
  const upstream = `http://127.0.0.1:${stubPort}`
  const [, routerUrl] = await start(
    ['--initial-old-space-size=128', 'dist/cli.js', 'serve', '--upstream', upstream, '--port', '0', '--admin-port', '0', '--host', '127.0.0.1', '--log-level', 'warn'],
    /on (http:\/\/[\d.:]+) \(admin/,
    'stderr',
  )
  // Peers on the HTTP/1.1 rows: the floor of a Node proxy, and C proxies for what one extra hop
  // costs on this machine.
  const [, floorPort] = await start(['bench/peers/node-floor.mjs', upstream], /listening (\d+)/, 'stdout')
  const { peers, skipped } = await startCProxies(upstream)
  for (const p of peers) children.push(p.child)
  const h1Paths: [string, string][] = [['direct', upstream], ['router', routerUrl!], ['node-floor', `http://127.0.0.1:${floorPort}`], ...peers.map((p): [string, string] => [p.name, p.url])]
  console.log(`prefix-router proxy overhead — node ${process.version}; open loop ${RATE} req/s for ${DURATION_S} s per row, 8 KiB chat bodies`)
  console.log(`stub upstream ${upstream}; router ${routerUrl} (prefix_aware, separate process)`)
  console.log(`peers on the h1 rows: node-floor (Node HTTP server + undici, no routing work)${peers.map((p) => `, ${p.name}`).join('')}${skipped.length ? `; skipped: ${skipped.join(', ')}` : ''}\n`)
  console.log(`${pad('client / response', 24)}${pad('path', 12)}${pad('TTFB p50', 11)}${pad('p99', 11)}${pad('p99.9', 11)}${pad('last p50', 11)}${pad('p99', 11)}errors`)
  const added: string[] = []
  for (const proto of ['h1', 'h2c'] as const) {
    for (const stream of [false, true]) {
      const label = `${proto} / ${stream ? 'SSE' : 'JSON'}`
      // The stub speaks HTTP/1.1 only; the h2c rows use h2c to the router and h1 direct.
      const paths = proto === 'h1' ? h1Paths : h1Paths.slice(0, 2)
      const senders = paths.map(([name, url]): [string, Sender] => [name, proto === 'h2c' && name === 'router' ? h2Sender(url) : h1Sender(url)])
      const rows = await compare(senders, stream)
      for (const [, sender] of senders) await sender.close()
      for (const [name] of paths) {
        const r = rows[name]!
        console.log(
          `${pad(label, 24)}${pad(name, 12)}${pad(us(r.ttfb.getValueAtPercentile(50)), 11)}${pad(us(r.ttfb.getValueAtPercentile(99)), 11)}${pad(us(r.ttfb.getValueAtPercentile(99.9)), 11)}${pad(us(r.total.getValueAtPercentile(50)), 11)}${pad(us(r.total.getValueAtPercentile(99)), 11)}${r.errors}`,
        )
      }
      console.log(`${pad('', 24)}send lag behind schedule (router row) p50 ${us(rows.router!.lag.getValueAtPercentile(50))}, p99 ${us(rows.router!.lag.getValueAtPercentile(99))}`)
      const d = rows.direct!.ttfb
      for (const [name] of paths.slice(1)) {
        const r = rows[name]!.ttfb
        const add = (p: number) => r.getValueAtPercentile(p) - d.getValueAtPercentile(p)
        const verdict = (v: number, limit: number) => (name === 'router' ? ` (target < ${us(limit)}: ${v < limit ? 'met' : 'MISSED'})` : '')
        added.push(`${pad(label, 13)}${pad(name, 12)}added p50 ${pad(us(add(50)) + verdict(add(50), 150), 34)} p99 ${pad(us(add(99)) + verdict(add(99), 1000), 32)} p99.9 ${us(add(99.9))}`)
      }
    }
  }
  console.log('\nadded latency to first byte (path − direct, same run):')
  for (const a of added) console.log(`  ${a}`)

  console.log('\nhighest sustained rate, closed loop, 64 outstanding, 3 s, HTTP/1.1, JSON:')
  const direct = await maxRate(h1Sender(upstream), 64, 3)
  const via = await maxRate(h1Sender(routerUrl!), 64, 3)
  console.log(`  direct ${Math.round(direct).toLocaleString('en-US')} req/s   through the router ${Math.round(via).toLocaleString('en-US')} req/s   (${(via / direct).toFixed(2)}× of direct; all three processes share this machine's 2 cores)`)

  // The routing decision alone, in this process: extract the key from an 8 KiB body, then pick.
  const router = new Router({ instances: Array.from({ length: 7 }, (_, i) => ({ id: `http://10.0.0.${i}:8000` })) })
  const text = body(1, false)
  const key = openAIRequest('chat', Buffer.from(text), 4096).text
  const pickH = histogram()
  const extractH = histogram()
  for (let i = 0; i < 200_000; i++) {
    const a = process.hrtime.bigint()
    router.pick(key).release()
    const b = process.hrtime.bigint()
    pickH.recordValue(Math.max(1, Number(b - a) / 1000))
    if (i % 10 === 0) {
      const c = process.hrtime.bigint()
      openAIRequest('chat', Buffer.from(text), 4096)
      extractH.recordValue(Math.max(1, Number(process.hrtime.bigint() - c) / 1000))
    }
  }
  router.close()
  const p99 = pickH.getValueAtPercentile(99)
  console.log(`\nrouting decision (pick + release, ${[...key].length}-character key, 7 instances, µs resolution): p50 ${us(pickH.getValueAtPercentile(50))}, p99 ${us(p99)} (target < 20 µs: ${p99 < 20 ? 'met' : 'MISSED'}), p99.9 ${us(pickH.getValueAtPercentile(99.9))}`)
  console.log(`key extraction from the 8 KiB body (JSON.parse + message text): p50 ${us(extractH.getValueAtPercentile(50))}, p99 ${us(extractH.getValueAtPercentile(99))}`)
}

main()
  .catch((err: unknown) => {
    console.error(err)
    process.exitCode = 1
  })
  .finally(() => {
    for (const c of children) c.kill('SIGTERM')
  })
