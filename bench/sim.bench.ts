// The simulator's own capacity, on this machine, in one process each:
// 1. live: 8 workers at --time-scale 1 in a child process, held at 500 concurrent SSE
//    streams by a load generator in this process (127.0.0.1 only). Reports streams
//    sustained, streamed tokens/s, and the simulator process's CPU (process.cpuUsage,
//    measured inside it) as a share of one core.
// 2. virtual: 8 instances, 2,000-token prompts (1,500 shared among 64 prefixes + 500
//    unique), 128 output tokens, Poisson arrivals; simulated requests per wall second, for
//    the engine on prepared prompts, end to end on one thread (rendering and hashing each
//    prompt included), and end to end with hashing in a worker thread feeding the engine.
// Run: npx tsx bench/sim.bench.ts   (LIVE_S=15 VIRTUAL_N=100000 STREAMS=500 to change)
import { fork } from 'node:child_process'
import http from 'node:http'
import { fileURLToPath } from 'node:url'
import { Worker } from 'node:worker_threads'

const LIVE_S = Number(process.env.LIVE_S ?? 15)
const STREAMS = Number(process.env.STREAMS ?? 500)
const WORKERS = 8
const VIRTUAL_N = Number(process.env.VIRTUAL_N ?? 100_000)
const OUTPUT_TOKENS = 128

type ChildMsg = { urls: string[] } | { cpuMs: number; wallMs: number }

// ---- the simulator side (child process) -------------------------------------------
async function child(): Promise<void> {
  const { startSimFleet } = await import('../src/sim/index.js')
  const fleet = await startSimFleet({ instances: WORKERS, port: 0, timeScale: 1 })
  let cpu0 = process.cpuUsage()
  let t0 = performance.now()
  process.on('message', (m: string) => {
    if (m === 'start') {
      cpu0 = process.cpuUsage()
      t0 = performance.now()
    } else if (m === 'stop') {
      const c = process.cpuUsage(cpu0)
      process.send!({ cpuMs: (c.user + c.system) / 1000, wallMs: performance.now() - t0 } satisfies ChildMsg)
    } else if (m === 'exit') {
      void fleet.close().then(() => process.exit(0))
    }
  })
  process.send!({ urls: fleet.urls } satisfies ChildMsg)
}

// ---- the load generator (this process) ----------------------------------------------
interface LiveResult {
  streamsAvg: number
  tokensPerSec: number
  cpuShare: number
  completed: number
  errors: number
}

async function live(): Promise<LiveResult> {
  const sim = fork(fileURLToPath(import.meta.url), ['--child'], { stdio: ['ignore', 'inherit', 'inherit', 'ipc'] })
  const next = (): Promise<ChildMsg> => new Promise((resolve) => sim.once('message', (m) => resolve(m as ChildMsg)))
  const { urls } = (await next()) as { urls: string[] }
  const agent = new http.Agent({ keepAlive: true, maxSockets: STREAMS })
  const prefixes = Array.from({ length: 32 }, (_, i) => `shared context ${i} `.padEnd(4000, `doc${i} `))
  let inFlight = 0
  let tokens = 0
  let completed = 0
  let errors = 0
  let running = true
  let seq = 0

  const one = (): void => {
    const i = seq++
    const url = new URL('/v1/chat/completions', urls[i % WORKERS])
    const body = JSON.stringify({
      messages: [
        { role: 'system', content: prefixes[i % prefixes.length] },
        { role: 'user', content: `question ${i} `.padEnd(400, 'q') },
      ],
      max_tokens: 100 + (i % 100),
      stream: true,
    })
    inFlight++
    const req = http.request(url, { method: 'POST', agent, headers: { 'content-type': 'application/json' } }, (res) => {
      res.setEncoding('utf8')
      res.on('data', (chunk: string) => {
        // each content delta is a run of 4-character filler tokens
        let at = 0
        for (;;) {
          at = chunk.indexOf('"content":"', at)
          if (at < 0) break
          const end = chunk.indexOf('"', at + 11)
          if (end > at + 11) tokens += (end - at - 11) / 4
          at = end < 0 ? chunk.length : end
        }
      })
      res.on('end', () => {
        inFlight--
        if (res.statusCode === 200) completed++
        else errors++
        if (running) one()
      })
    })
    req.on('error', () => {
      inFlight--
      errors++
      if (running) one()
    })
    req.end(body)
  }

  for (let i = 0; i < STREAMS; i++) one()
  await new Promise((r) => setTimeout(r, 5000)) // warm-up: every stream started, caches filled
  tokens = 0
  completed = 0
  sim.send('start')
  const t0 = performance.now()
  let samples = 0
  let inFlightSum = 0
  const sampler = setInterval(() => {
    samples++
    inFlightSum += inFlight
  }, 100)
  await new Promise((r) => setTimeout(r, LIVE_S * 1000))
  clearInterval(sampler)
  sim.send('stop')
  const usage = (await next()) as { cpuMs: number; wallMs: number }
  const wall = performance.now() - t0
  const result: LiveResult = {
    streamsAvg: inFlightSum / Math.max(1, samples),
    tokensPerSec: tokens / (wall / 1000),
    cpuShare: usage.cpuMs / usage.wallMs,
    completed,
    errors,
  }
  running = false
  sim.send('exit')
  await new Promise((r) => sim.once('exit', r))
  agent.destroy()
  return result
}

// ---- the virtual engine ---------------------------------------------------------------
interface VirtualRun {
  reqPerSec: number
  simSeconds: number
  meanTtftMs: number
  hitRate: number
}

const PREFIXES = Array.from({ length: 64 }, (_, i) => `system ${i} `.padEnd(6000, `doc${i} `))
const text = (i: number): string => PREFIXES[i % 64]! + `user request ${i} `.padEnd(2000, 'q')

// The hashing worker is plain JS (tsx's loader does not reach worker threads on Node 20):
// it loads the addon and repeats block-hash.ts preparePromptText and text() above. The
// bench checks its keys against fleet.prepare and its results against the other runs.
const PREPARE_WORKER = `
const { parentPort, workerData } = require('node:worker_threads')
const native = require(workerData.bindingPath)
const { prefixes, blockBytes } = workerData
const seed = BigInt(workerData.seed)
const text = (i) => prefixes[i % 64] + ('user request ' + i + ' ').padEnd(2000, 'q')
const encoder = new TextEncoder()
let scratch = new Uint8Array(1 << 16), views = []
const makeViews = () => { views = []; for (let o = 0; o + blockBytes <= scratch.length; o += blockBytes) views.push(scratch.subarray(o, o + blockBytes)) }
makeViews()
parentPort.on('message', ({ from, to }) => {
  const tokens = new Int32Array(to - from), offsets = new Int32Array(to - from + 1), parts = []
  let total = 0
  for (let i = from; i < to; i++) {
    const t = text(i)
    if (scratch.length < t.length * 3) { scratch = new Uint8Array(t.length * 3); makeViews() }
    const n = encoder.encodeInto(t, scratch).written, full = Math.floor(n / blockBytes), keys = new Float64Array(full)
    let h = seed
    for (let b = 0; b < full; b++) { h = native.xxh3(views[b], h); keys[b] = Number(BigInt.asUintN(52, h)) }
    tokens[i - from] = Math.ceil(n / 4); parts.push(keys); total += full; offsets[i - from + 1] = total
  }
  const keys = new Float64Array(total)
  parts.forEach((k, j) => keys.set(k, offsets[j]))
  parentPort.postMessage({ from, tokens, offsets, keys }, [tokens.buffer, offsets.buffer, keys.buffer])
})
`

type Mode = 'prepared' | 'inline' | 'worker'

async function virtual(mode: Mode): Promise<VirtualRun> {
  const { VirtualFleet, cacheSeed } = await import('../src/sim/index.js')
  const { bindingPath } = await import('../src/core/native.js')
  const fleet = new VirtualFleet({ instances: WORKERS })
  const ready = mode === 'prepared' ? Array.from({ length: VIRTUAL_N }, (_, i) => fleet.prepare({ text: text(i) })) : []
  let rng = 7
  const random = (): number => (rng = (rng * 1103515245 + 12345) & 0x7fffffff) / 0x7fffffff
  let done = 0
  let ttft = 0
  let cached = 0
  let promptTokens = 0
  const onFinish = (r: { ttftMs: number; cachedTokens: number; promptTokens: number }): void => {
    done++
    ttft += r.ttftMs
    cached += r.cachedTokens
    promptTokens += r.promptTokens
  }
  const ratePerSec = 120 // ~80% of what 8 instances sustain with this workload
  let at = 0
  const arrive = (i: number, req: Parameters<typeof fleet.submit>[1]): void => {
    at += (-Math.log(1 - random()) / ratePerSec) * 1000
    // prefix-affine placement, as a prefix-aware router would do
    fleet.submit((i % 64) % WORKERS, req, { at, onFinish })
  }
  const BATCH = 1000
  let worker: Worker | undefined
  if (mode === 'worker') {
    worker = new Worker(PREPARE_WORKER, {
      eval: true,
      workerData: { bindingPath, prefixes: PREFIXES, blockBytes: fleet.sim.engine.blockSize * 4, seed: String(cacheSeed(fleet.sim.model)) },
    })
  }
  const t0 = performance.now()
  if (worker !== undefined) {
    type Batch = { from: number; tokens: Int32Array; offsets: Int32Array; keys: Float64Array }
    const batches = new Map<number, Batch>()
    let wake: (() => void) | undefined
    worker.on('message', (b: Batch) => {
      batches.set(b.from, b)
      wake?.()
    })
    let asked = 0
    const ask = (): void => {
      if (asked < VIRTUAL_N) worker!.postMessage({ from: asked, to: Math.min(VIRTUAL_N, (asked += BATCH)) })
    }
    for (let k = 0; k < 4; k++) ask() // keep the worker ahead of the engine
    for (let from = 0; from < VIRTUAL_N; from += BATCH) {
      while (!batches.has(from)) await new Promise<void>((r) => (wake = r))
      const b = batches.get(from)!
      batches.delete(from)
      ask()
      if (from === 0) {
        const check = fleet.prepare({ text: text(0) })
        if (check.promptTokens !== b.tokens[0] || check.blockKeys.some((k, j) => k !== b.keys[j])) throw new Error('worker keys differ')
      }
      for (let j = 0; j < b.tokens.length; j++) {
        const prepared = { promptTokens: b.tokens[j]!, blockKeys: b.keys.subarray(b.offsets[j]!, b.offsets[j + 1]!) }
        arrive(from + j, { prepared, maxTokens: OUTPUT_TOKENS })
      }
      fleet.run(at)
    }
    await worker.terminate()
  } else {
    for (let i = 0; i < VIRTUAL_N; i++) {
      arrive(i, mode === 'prepared' ? { prepared: ready[i]!, maxTokens: OUTPUT_TOKENS } : { text: text(i), maxTokens: OUTPUT_TOKENS })
      if (i % BATCH === BATCH - 1) fleet.run(at)
    }
  }
  fleet.run()
  const wall = performance.now() - t0
  if (done !== VIRTUAL_N) throw new Error(`only ${done} of ${VIRTUAL_N} requests finished`)
  return { reqPerSec: VIRTUAL_N / (wall / 1000), simSeconds: fleet.now / 1000, meanTtftMs: ttft / done, hitRate: cached / promptTokens }
}

function row(what: string, measured: string, target: string, ok?: boolean): void {
  const mark = ok === undefined ? '' : ok ? '  [meets target]' : '  [below target]'
  process.stdout.write(`  ${what.padEnd(48)} ${measured.padStart(14)}   target ${target}${mark}\n`)
}

async function main(): Promise<void> {
  process.stdout.write(`prefix-router sim benchmark (node ${process.version})\n\nlive: ${WORKERS} workers, --time-scale 1, ${STREAMS} concurrent SSE streams, ${LIVE_S} s window\n`)
  const l = await live()
  row('concurrent streams sustained (mean)', l.streamsAvg.toFixed(0), `${STREAMS}`, l.streamsAvg >= STREAMS * 0.98 && l.errors === 0)
  row('streamed tokens / s', l.tokensPerSec.toFixed(0), '(as the model gives at this load)')
  row('streams completed in the window / errors', `${l.completed} / ${l.errors}`, '0 errors', l.errors === 0)
  row('simulator CPU, share of one core', `${(l.cpuShare * 100).toFixed(1)} %`, '< 50 %', l.cpuShare < 0.5)

  process.stdout.write(`\nvirtual: ${WORKERS} instances, ${VIRTUAL_N} requests of 2,000 prompt tokens + ${OUTPUT_TOKENS} output tokens\n`)
  const e = await virtual('prepared')
  row('engine, prompts prepared beforehand: req / s', e.reqPerSec.toFixed(0), '> 50,000', e.reqPerSec > 50_000)
  const f = await virtual('inline')
  row('end to end, hashing on the same thread: req / s', f.reqPerSec.toFixed(0), '> 50,000', f.reqPerSec > 50_000)
  const w = await virtual('worker')
  row('end to end, hashing in a worker thread: req / s', w.reqPerSec.toFixed(0), '> 50,000', w.reqPerSec > 50_000)
  const same = e.meanTtftMs === f.meanTtftMs && f.meanTtftMs === w.meanTtftMs && e.hitRate === w.hitRate
  process.stdout.write(
    `  (simulated ${e.simSeconds.toFixed(0)} s of traffic; mean TTFT ${e.meanTtftMs.toFixed(1)} ms; ` +
      `prefix cache hit rate ${(e.hitRate * 100).toFixed(1)} %; same results in all three runs: ${same})\n`,
  )
}

if (process.argv.includes('--child')) await child()
else await main()
