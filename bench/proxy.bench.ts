// Router overhead: the same open-loop load sent straight to a fast stub upstream and through
// `prefix-router serve` in front of it, side by side in one run. Requests are paced by timers
// on a fixed schedule whatever the responses do (open loop); latency runs from the actual
// send to the first and to the last response byte, in HDR histograms. (Measuring from the
// schedule would add the timers' ~1 ms resolution to both paths; how late sends ran is
// printed so a saturated generator shows.) Then the highest rate each path sustains (closed loop), and the routing
// decision alone, in process. Each process (stub, router, load) is separate.
// Run: npm run bench:proxy   (RATE=1000 DURATION_S=5 to change the open-loop load)
import { spawn, type ChildProcess } from 'node:child_process'
import http2 from 'node:http2'
import { fileURLToPath } from 'node:url'
import * as hdr from 'hdr-histogram-js'
import { Client } from 'undici'
import { openAIRequest } from '../src/prefix/openai-key.js'
import { Router } from '../src/router.js'

const RATE = Number(process.env.RATE ?? 1000)
const DURATION_S = Number(process.env.DURATION_S ?? 5)
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

/** Open loop at RATE for DURATION_S: latency from the scheduled send time. */
async function openLoop(sender: Sender, stream: boolean) {
  const ttfb = histogram()
  const total = histogram()
  const lag = histogram() // how late each send was against the schedule (timer resolution)
  const n = RATE * DURATION_S
  const bodies = Array.from({ length: 64 }, (_, i) => body(i, stream))
  // Warm up connections and JIT.
  await Promise.all(Array.from({ length: 200 }, (_, i) => sender.send(bodies[i % 64]!)))
  const t0 = process.hrtime.bigint() + 10_000_000n
  const interval = BigInt(Math.round(1e9 / RATE))
  const pending: Promise<void>[] = []
  let errors = 0
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
            () => void errors++,
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
  return { ttfb, total, errors, lag }
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
    ['dist/cli.js', 'serve', '--upstream', upstream, '--port', '0', '--admin-port', '0', '--host', '127.0.0.1', '--log-level', 'warn'],
    /on (http:\/\/[\d.:]+) \(admin/,
    'stderr',
  )
  console.log(`prefix-router proxy overhead — node ${process.version}; open loop ${RATE} req/s for ${DURATION_S} s per row, 8 KiB chat bodies`)
  console.log(`stub upstream ${upstream}; router ${routerUrl} (prefix_aware, separate process)\n`)
  console.log(`${pad('client / response', 24)}${pad('path', 9)}${pad('TTFB p50', 11)}${pad('p99', 11)}${pad('p99.9', 11)}${pad('last p50', 11)}${pad('p99', 11)}errors`)
  const added: string[] = []
  for (const proto of ['h1', 'h2c'] as const) {
    for (const stream of [false, true]) {
      const rows: Record<string, Awaited<ReturnType<typeof openLoop>>> = {}
      for (const [name, url] of [['direct', upstream], ['router', routerUrl!]] as const) {
        // The stub speaks HTTP/1.1 only; the h2c rows use h2c to the router and h1 direct.
        const sender = proto === 'h2c' && name === 'router' ? h2Sender(url) : h1Sender(url)
        rows[name] = await openLoop(sender, stream)
        await sender.close()
        const r = rows[name]!
        console.log(
          `${pad(`${proto} / ${stream ? 'SSE' : 'JSON'}`, 24)}${pad(name, 9)}${pad(us(r.ttfb.getValueAtPercentile(50)), 11)}${pad(us(r.ttfb.getValueAtPercentile(99)), 11)}${pad(us(r.ttfb.getValueAtPercentile(99.9)), 11)}${pad(us(r.total.getValueAtPercentile(50)), 11)}${pad(us(r.total.getValueAtPercentile(99)), 11)}${r.errors}`,
        )
      }
      console.log(`${pad('', 24)}send lag behind schedule p50 ${us(rows.router!.lag.getValueAtPercentile(50))}, p99 ${us(rows.router!.lag.getValueAtPercentile(99))}`)
      const d = rows.direct!.ttfb
      const r = rows.router!.ttfb
      const add = (p: number) => r.getValueAtPercentile(p) - d.getValueAtPercentile(p)
      added.push(`${pad(`${proto} / ${stream ? 'SSE' : 'JSON'}`, 24)}added p50 ${pad(us(add(50)), 10)} (target < 150 µs: ${add(50) < 150 ? 'met' : 'MISSED'})   p99 ${pad(us(add(99)), 10)} (target < 1 ms: ${add(99) < 1000 ? 'met' : 'MISSED'})   p99.9 ${us(add(99.9))}`)
    }
  }
  console.log('\nadded latency to first byte (router − direct, same run):')
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
