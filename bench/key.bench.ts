// Routing-key extraction: the native scan (nativeRequest + Router.pick of its ExtractedKey)
// against the TypeScript path it replaces in serve (JSON.parse + openAIRequest + Router.pick
// of the text string, whose UTF-8 conversion is part of the pick), measured in the same run;
// then how long serve's event loop stalls while it takes 16 MiB bodies of each shape.
// Run: npm run bench:key   (BENCH_TIME_MS=… to change the time per task, default 500;
// KEY_BENCH_SKIP_THROUGHPUT=1 to run only the event-loop and 16 MiB parts, KEY_BENCH_ONLY_THROUGHPUT=1
// only the throughput table; KEY_BENCH_LOOP_REPS=… to change how often each body is sent to serve,
// default 5)
//
// Throughput is bytes of request body per second. Each sample runs a batch of calls sized to
// ~50 µs; warm-up samples are discarded by tinybench.
import { spawn, type ChildProcess } from 'node:child_process'
import { monitorEventLoopDelay } from 'node:perf_hooks'
import readline from 'node:readline'
import { parseConfig } from '../src/config/config.js'
import { keyBinding, nativeRequest } from '../src/core/key/native-key.js'
import { openAIRequest } from '../src/core/key/openai-key.js'
import { Router } from '../src/core/router.js'
import { closeParsePool } from '../src/request/parse-pool.js'
import { ProxyServer } from '../src/proxy/proxy.js'
import { machine, perCall } from './harness.js'

const TIME = Number(process.env.BENCH_TIME_MS ?? 500)
console.log(`machine: ${machine()}`)

const perCallNs = async (name: string, fn: () => void, estimateNs: number) =>
  (await perCall(name, fn, estimateNs, { timeMs: TIME, warmupMs: 200, targetUs: 50 })).medianNs

/** A chat body of about `bytes`: a long system prompt, a few turns, some accents and escapes. */
function chatBody(bytes: number): Buffer {
  const turns = [
    { role: 'user', content: 'Résumé of the ticket, please.\nKeep it short.' },
    { role: 'assistant', content: 'The customer reports "error 42" after the update; café-style UI broken.' },
    { role: 'user', content: 'And the next step?' },
  ]
  const fixed = JSON.stringify({ model: 'llama-3-8b', stream: true, temperature: 0.2, messages: [{ role: 'system', content: '' }, ...turns] }).length
  const system = 'You are a meticulous assistant for the ACME support desk; answer with care. '.repeat(bytes).slice(0, bytes - fixed)
  return Buffer.from(JSON.stringify({ model: 'llama-3-8b', stream: true, temperature: 0.2, messages: [{ role: 'system', content: system }, ...turns] }))
}

async function throughput(): Promise<void> {
  const body = chatBody(8192)
  const instances = Array.from({ length: 8 }, (_, i) => ({ id: `http://10.0.0.${i + 1}:8000` }))
  console.log(`\nkey extraction of a ${body.length}-byte chat body (GB/s of body; ratio = native ÷ TypeScript, higher is better)`)
  console.log('  native = nativeRequest + pick; scan alone = nativeRequest; native call = the key_extract binding alone (all three hash the key in the scan, as serve does)')
  console.log(`${'strategy'.padEnd(16)}${'native'.padEnd(12)}${'TypeScript'.padEnd(13)}${'ratio'.padEnd(9)}${'scan alone'.padEnd(13)}${'native call'.padEnd(14)}target`)
  for (const strategy of ['prefix_aware', 'longest_prefix'] as const) {
    const router = new Router({ strategy, prefixLength: 4096, instances })
    const span = strategy === 'longest_prefix' ? Math.max(4096, router.params.matchLength) : 4096
    // As serve reads it: the key (and longest_prefix's chain) hashed in the scan, no tenant.
    const blockBytes = strategy === 'longest_prefix' ? router.params.blockSize : 0
    const o = { span, prefixLength: 4096, maxDepth: 64, hash: { tenant: undefined, blockBytes } }
    const check = nativeRequest('chat', body, o)
    if (check.status !== 'ok') throw new Error(`native extraction declined the benchmark body: ${check.status}`)
    const native = await perCallNs('native', () => {
      const r = nativeRequest('chat', body, o)
      if (r.status === 'ok') router.pick(r.request.key).release()
    }, 3000)
    const ts = await perCallNs('ts', () => {
      const r = openAIRequest('chat', body, span)
      router.pick(r.text, { ...(r.anchor !== undefined && { anchor: r.anchor }) }).release()
    }, 20000)
    const scan = await perCallNs('scan', () => nativeRequest('chat', body, o), 2000)
    // The extraction itself: what native/key costs, without the wrapper's objects or the pick.
    const out = new Uint8Array(2 * body.length)
    // The binding reads its numbers from io and writes its results over them: set each call.
    const io = new Float64Array(12)
    const prefix = Math.min(o.prefixLength, span)
    const call = await perCallNs('call', () => {
      io[0] = 0
      io[1] = span
      io[2] = prefix
      io[3] = o.maxDepth
      io[4] = 0
      io[5] = blockBytes
      io[6] = 1
      keyBinding.key_extract(body, out, io, undefined)
    }, 1500)
    const gbs = (ns: number) => body.length / ns
    console.log(
      `${strategy.padEnd(16)}${`${gbs(native).toFixed(2)} GB/s`.padEnd(12)}${`${gbs(ts).toFixed(2)} GB/s`.padEnd(13)}${`${(ts / native).toFixed(1)}x`.padEnd(9)}${`${gbs(scan).toFixed(2)} GB/s`.padEnd(13)}${`${gbs(call).toFixed(2)} GB/s`.padEnd(14)}native >= 3 GB/s: ${gbs(native) >= 3 ? 'met' : 'MISSED'}; native call: ${gbs(call) >= 3 ? 'met' : 'MISSED'}`,
    )
    router.close()
  }
}

/** `bytes` of one-element arrays side by side, [[0],[0],...], as one member of a chat body. */
function arraysBody(bytes: number): Buffer {
  const head = Buffer.from('{"model":"m","messages":[{"role":"user","content":"hi"}],"x":[')
  const n = Math.floor((bytes - head.length - 1) / 4)
  const b = Buffer.alloc(head.length + n * 4 + 1)
  head.copy(b)
  for (let i = 0; i < n; i++) b.write(i === n - 1 ? '[0]]' : '[0],', head.length + i * 4, 'latin1')
  b[b.length - 1] = 0x7d
  return b
}

// The main thread's own cost of the native scan on 16 MiB: why large bodies still go to a worker.
function mainThreadScan(): void {
  const MiB = 1 << 20
  const bodies: [string, Buffer][] = [
    ['prompt text', Buffer.from(JSON.stringify({ messages: [{ role: 'user', content: 'The quick brown fox. '.repeat((16 * MiB) / 21) }] }))],
    ['[0] arrays', arraysBody(16 * MiB)],
  ]
  console.log('\nnative scan of 16 MiB on the calling thread (best of 3), against JSON.parse + openAIRequest of the same body (once)')
  for (const [name, b] of bodies) {
    let best = Infinity
    for (let i = 0; i < 3; i++) {
      const t = performance.now()
      if (nativeRequest('chat', b, { span: 4096, prefixLength: 4096, maxDepth: 64 }).status !== 'ok') throw new Error(`${name}: declined`)
      best = Math.min(best, performance.now() - t)
    }
    const t = performance.now()
    openAIRequest('chat', b, 4096)
    const parse = performance.now() - t
    console.log(`  ${name.padEnd(14)} native ${best.toFixed(1)} ms (${(b.length / best / 1e6).toFixed(2)} GB/s)   JSON.parse path ${parse.toFixed(0)} ms   ratio ${(parse / best).toFixed(1)}x`)
  }
}

// The upstream and the client run in a child process, so that what blocks this process's
// event loop is serve's own work, not the client's writing or the upstream's reading of 16 MiB.
const PEER = `
import http from 'node:http'
import readline from 'node:readline'
const head = Buffer.from('{"model":"m","messages":[{"role":"user","content":"hi"}],"x":[')
function arrays(bytes) {
  const n = Math.floor((bytes - head.length - 1) / 4)
  const b = Buffer.alloc(head.length + n * 4 + 1, '[0],')
  head.copy(b)
  b.write('[0],'.repeat(n).slice(0, -1) + ']', head.length, 'latin1')
  b[b.length - 1] = 0x7d
  return b
}
const nested = (bytes) => Buffer.alloc(bytes, 0x5d).fill(0x5b, 0, bytes / 2)
const text = (bytes) => {
  const b = Buffer.alloc(bytes, 'The quick brown fox. ')
  const head = Buffer.from('{"model":"m","messages":[{"role":"user","content":"')
  head.copy(b)
  b.write('"}]}', bytes - 4, 'latin1')
  return b
}
const bodies = { arrays, nested, text }
const up = http.createServer((req, res) => { req.resume(); req.on('end', () => { res.writeHead(200, { 'content-type': 'application/json' }); res.end('{"object":"chat.completion","choices":[]}') }) })
up.listen(0, '127.0.0.1', () => console.log('upstream ' + up.address().port))
readline.createInterface({ input: process.stdin }).on('line', (line) => {
  const [url, kind, bytes] = line.split(' ')
  const body = bodies[kind](Number(bytes))
  // One line per request: a refused body can both be answered and see its connection closed.
  let said = false
  const say = (s) => {
    if (!said) console.log('status ' + s)
    said = true
  }
  const req = http.request(url + '/v1/chat/completions', { method: 'POST', agent: false, headers: { 'content-type': 'application/json', 'content-length': body.length } }, (res) => {
    res.resume()
    res.on('end', () => say(res.statusCode))
  })
  // Refused unread, the connection closes while the rest is being written.
  req.on('error', (e) => say(e.code === 'EPIPE' || e.code === 'ECONNRESET' ? 'closed' : e.code))
  req.end(body)
})
`

type BodyKind = 'arrays' | 'nested' | 'text'

class Peer {
  readonly #child: ChildProcess
  readonly #lines: string[] = []
  #wake: (() => void) | undefined
  constructor() {
    this.#child = spawn(process.execPath, ['--input-type=module', '-e', PEER], { stdio: ['pipe', 'pipe', 'inherit'] })
    readline.createInterface({ input: this.#child.stdout! }).on('line', (l) => {
      this.#lines.push(l)
      this.#wake?.()
    })
  }
  async line(): Promise<string> {
    while (this.#lines.length === 0) await new Promise<void>((r) => (this.#wake = r))
    return this.#lines.shift()!
  }
  send(url: string, kind: BodyKind, bytes: number): Promise<string> {
    this.#child.stdin!.write(`${url} ${kind} ${bytes}\n`)
    return this.line()
  }
  close(): void {
    this.#child.kill()
  }
}

/** Watches the event loop: the longest gap between 1 ms timer ticks, and perf_hooks' histogram. */
function watch(): () => { gapMs: number; histMs: number } {
  const h = monitorEventLoopDelay({ resolution: 1 })
  let last = performance.now()
  let gap = 0
  const tick = setInterval(() => {
    const now = performance.now()
    gap = Math.max(gap, now - last)
    last = now
  }, 1)
  h.enable()
  return () => {
    h.disable()
    clearInterval(tick)
    return { gapMs: gap, histMs: h.max / 1e6 }
  }
}

/**
 * The longest the event loop was held while serve took a body, and the same measure over as
 * long a time with nothing to do right after: on a shared machine the process is sometimes
 * not scheduled at all, which no code of ours causes.
 */
async function longestBlock(peer: Peer, url: string, kind: BodyKind, bytes: number): Promise<{ status: string; gapMs: number; histMs: number; idleMs: number }> {
  const t = performance.now()
  const stop = watch()
  const status = (await peer.send(url, kind, bytes)).replace('status ', '')
  const busy = stop()
  const idle = watch()
  await new Promise((r) => setTimeout(r, performance.now() - t))
  return { status, ...busy, idleMs: idle().gapMs }
}

async function eventLoop(): Promise<void> {
  const peer = new Peer()
  const upUrl = `http://127.0.0.1:${(await peer.line()).replace('upstream ', '')}`
  const config = (prompts: boolean) =>
    parseConfig({
      listen: { host: '127.0.0.1', port: 0 },
      admin: { host: '127.0.0.1', port: 0 },
      health: { intervalMs: 0, timeoutMs: 2000 },
      discovery: { modelsIntervalMs: 0, metricsIntervalMs: 0 },
      limits: { maxBodyBytes: 32 << 20 },
      log: { level: 'silent', prompts },
      endpoints: [{ name: 'default', instances: [upUrl] }],
    })
  const MiB = 1 << 20
  // The TypeScript path's worker needs more than its heap to JSON.parse 16 MiB of arrays (it
  // answers 413 after a long garbage-collecting struggle), so it is also compared at 4 MiB.
  const bodies: [string, BodyKind, number, boolean][] = [
    ['16 MiB of [0] arrays', 'arrays', 16 * MiB, false],
    ['4 MiB of [0] arrays', 'arrays', 4 * MiB, true],
    ['16 MiB prompt text', 'text', 16 * MiB, true],
    ['16 MiB nested [[[…]]]', 'nested', 16 * MiB, true], // refused: 400, or closed mid-write
  ]
  // One sample's longest gap says little on a shared machine: each body is sent several times,
  // and the median and the worst are shown, beside the same for as long with nothing to do.
  const reps = Number(process.env.KEY_BENCH_LOOP_REPS ?? 5)
  const median = (xs: number[]) => [...xs].sort((a, b) => a - b)[xs.length >> 1]!
  const cell = (xs: number[]) => `${median(xs).toFixed(1)} / ${Math.max(...xs).toFixed(1)} ms`
  console.log(`\nlongest event-loop block of serve while it takes the body, median / worst of ${reps} (client and upstream in another process; target <= 10 ms)`)
  console.log(`${'body'.padEnd(24)}${'path'.padEnd(12)}${'status'.padEnd(12)}${'max gap'.padEnd(18)}${'eventLoopDelay max'.padEnd(20)}${'idle max gap (noise)'.padEnd(22)}target`)
  try {
    for (const [path, prompts] of [['native', false], ['TypeScript', true]] as const) {
      const proxy = await ProxyServer.start(config(prompts))
      try {
        // Warm-up, discarded: starts the parse worker and what a first request starts.
        await longestBlock(peer, proxy.url, 'arrays', MiB)
        for (const [name, kind, bytes, both] of bodies) {
          if (prompts && !both) continue
          const runs = []
          for (let i = 0; i < reps; i++) runs.push(await longestBlock(peer, proxy.url, kind, bytes))
          const statuses = [...new Set(runs.map((r) => r.status))].sort().join(',')
          const gap = median(runs.map((r) => r.gapMs))
          console.log(
            `${name.padEnd(24)}${path.padEnd(12)}${statuses.padEnd(12)}${cell(runs.map((r) => r.gapMs)).padEnd(18)}${cell(runs.map((r) => r.histMs)).padEnd(20)}${cell(runs.map((r) => r.idleMs)).padEnd(22)}${gap <= 10 ? 'met' : 'MISSED'}`,
          )
        }
      } finally {
        await proxy.close()
      }
    }
  } finally {
    peer.close()
    await closeParsePool()
  }
}

if (!process.env.KEY_BENCH_SKIP_THROUGHPUT) await throughput()
if (!process.env.KEY_BENCH_ONLY_THROUGHPUT) {
  await eventLoop()
  mainThreadScan()
}
console.log('\nTimings on a shared or busy machine are noisy: compare ratios from one run, not absolute numbers across runs.')
