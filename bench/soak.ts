// Soak under faults: `prefix-router serve` in front of 4 `prefix-router sim` workers, each in
// its own process on a fixed port, held at CONCURRENCY streaming chat completions for SECONDS.
// One worker answers 503 to 30% of requests from the start; another is SIGKILLed a third of
// the way in and started again on the same port at 35/60 of the run. Every request is
// recorded as the client saw it, and failures are sorted by why they failed, to check that
// the router's retries, probes and outlier ejection leave only the streams that were already
// running on the killed worker broken, and that its memory holds steady.
// Run: npm run bench:soak   (-- --seconds 20 for a quick check; --concurrency N, default 200)
// A measurement, not a test: it exits 0 whatever the targets say (1 only if it could not run).
import { spawn, type ChildProcess } from 'node:child_process'
import { setMaxListeners } from 'node:events'
import { mkdtempSync, readFileSync, rmSync, writeFileSync } from 'node:fs'
import net from 'node:net'
import { cpus, tmpdir } from 'node:os'
import { join } from 'node:path'
import { fileURLToPath } from 'node:url'
import { parseArgs } from 'node:util'
import { Pool, request } from 'undici'
import { parseConfig, readConfigFile, type Config } from '../src/config/config.js'

const { values: flags } = parseArgs({
  options: { seconds: { type: 'string', default: '60' }, concurrency: { type: 'string', default: '200' }, warmup: { type: 'string', default: '20' }, 'node-flags': { type: 'string', default: '--initial-old-space-size=128' } },
})
const SECONDS = Number(flags.seconds)
// The same load on a healthy fleet before the measured run: start-up (the JIT, pools, V8
// growing its heap to what this load needs) is not growth, and is discarded.
const WARMUP = Number(flags.warmup)
// The router's V8 flags: by default those `npm start` uses.
const NODE_FLAGS = (flags['node-flags'] ?? '').split(/\s+/).filter(Boolean)
if (!(WARMUP >= 0 && WARMUP <= 600)) throw new Error(`--warmup must be from 0 to 600 seconds; got '${flags.warmup}'`)
const CONCURRENCY = Number(flags.concurrency)
if (!(SECONDS >= 5 && SECONDS <= 3600)) throw new Error(`--seconds must be from 5 to 3600; got '${flags.seconds}'`)
if (!Number.isInteger(CONCURRENCY) || CONCURRENCY < 1 || CONCURRENCY > 2000) throw new Error(`--concurrency must be an integer from 1 to 2000; got '${flags.concurrency}'`)

// The schedule is written for 60 s and scales with --seconds, so a short run has the same shape.
const at = (s60: number) => (SECONDS * s60 * 1000) / 60
const KILL_MS = at(20)
const RESTART_MS = at(35)
const WORKERS = 4
const KILLED = 1
const FAULTY = 2
const ERROR_RATE = 0.3
const MODEL = 'soak-model'
const SYSTEM_PROMPTS = 24
const MAX_TOKENS = [8, 64] as const
// Requests still open this long after the load stops are aborted and counted as such.
const DRAIN_MS = 30_000

const root = fileURLToPath(new URL('..', import.meta.url))
const children = new Set<ChildProcess>()
const tmp = mkdtempSync(join(tmpdir(), 'prefix-router-soak-'))

function killAll(signal: NodeJS.Signals): void {
  for (const c of children) if (c.exitCode === null && c.signalCode === null) c.kill(signal)
}
// Whatever ends this process (an error, Ctrl-C, a normal end) must not leave a fleet running.
process.on('exit', () => {
  killAll('SIGKILL')
  rmSync(tmp, { recursive: true, force: true })
})
for (const s of ['SIGINT', 'SIGTERM', 'SIGHUP'] as const) {
  process.on(s, () => {
    process.stderr.write(`\nsoak: ${s}; stopping the router and the workers\n`)
    process.exit(s === 'SIGINT' ? 130 : 143)
  })
}

interface Proc {
  child: ChildProcess
}

/** Starts `node dist/cli.js ARGS` and resolves once `ready` matches its output. */
function start(name: string, args: string[], ready: RegExp, onLine?: (line: string) => void): Promise<Proc & { match: RegExpExecArray }> {
  const child = spawn(process.execPath, [...args], { cwd: root, stdio: ['ignore', 'pipe', 'pipe'] })
  children.add(child)
  child.once('exit', () => children.delete(child))
  let out = ''
  let partial = ''
  return new Promise((resolve, reject) => {
    let done = false
    const onData = (d: Buffer) => {
      const s = d.toString()
      // Only until ready: the router's warnings over a long run would grow it without end.
      if (!done) out += s
      if (onLine) {
        const lines = (partial + s).split('\n')
        partial = lines.pop()!
        for (const l of lines) onLine(l)
      }
      const m = done ? null : ready.exec(out)
      if (m) {
        done = true
        resolve({ child, match: m })
      }
    }
    child.stdout!.on('data', onData)
    child.stderr!.on('data', onData)
    child.once('exit', (code, sig) => {
      if (!done) reject(new Error(`${name} exited (${code ?? sig}) before it was ready:\n${out}`))
    })
  })
}

/** A port below the ephemeral range, free now: a connection's local port cannot take it while the killed worker is down. */
async function freePort(taken: Set<number>): Promise<number> {
  const [lo, hi] = readFileSync('/proc/sys/net/ipv4/ip_local_port_range', 'utf8').trim().split(/\s+/).map(Number)
  const top = Math.min(lo ?? 32768, 32768) - 1
  for (let i = 0; i < 200; i++) {
    const port = 20_000 + Math.floor(Math.random() * Math.max(1, top - 20_000))
    if (taken.has(port) || (port >= lo! && port <= hi!)) continue
    const ok = await new Promise<boolean>((resolve) => {
      const s = net.createServer()
      s.once('error', () => resolve(false))
      s.listen(port, '127.0.0.1', () => s.close(() => resolve(true)))
    })
    if (ok) return port
  }
  throw new Error('no free port found below the ephemeral range')
}

const simArgs = (port: number) => ['dist/cli.js', 'sim', '--port', String(port), '--instances', '1', '--model', MODEL]

async function startWorker(port: number): Promise<Proc> {
  // A restart right after SIGKILL can race the kernel releasing the port.
  for (let i = 0; ; i++) {
    try {
      return await start(`sim worker on ${port}`, simArgs(port), /http:\/\/\S+/)
    } catch (err) {
      if (i >= 20 || !/EADDRINUSE|cannot listen/.test(String(err))) throw err
      await new Promise((r) => setTimeout(r, 250))
    }
  }
}

// ---- the workload ---------------------------------------------------------------------

/** mulberry32, seeded: the same system prompts every run. */
function rng(seed: number): () => number {
  let s = seed >>> 0
  return () => {
    let t = (s = (s + 0x6d2b79f5) >>> 0)
    t = Math.imul(t ^ (t >>> 15), t | 1)
    t ^= t + Math.imul(t ^ (t >>> 7), t | 61)
    return ((t ^ (t >>> 14)) >>> 0) / 4294967296
  }
}

const WORDS = 'policy order refund shipping warranty account invoice delivery return exchange customer product support store region tax discount coupon payment card balance credit subscription plan upgrade device repair replacement schedule'.split(' ')

// System prompts longer than the routing prefix (4,096 code points), so the whole key is
// shared by every request with the same system prompt and placement by prefix decides.
const systems = Array.from({ length: SYSTEM_PROMPTS }, (_, i) => {
  const r = rng(1000 + i)
  const words: string[] = [`You are assistant ${i} of a large retailer; answer from the policy below.`]
  const target = 4500 + Math.floor(r() * 3000)
  let len = 0
  while (len < target) {
    const w = WORDS[Math.floor(r() * WORDS.length)]!
    words.push(w)
    len += w.length + 1
  }
  return words.join(' ')
})

const draw = rng(7)
/** Popular system prompts get most requests (Zipf-like), as tenants of one fleet would. */
const weights = systems.map((_, i) => 1 / (i + 1))
const weightSum = weights.reduce((a, b) => a + b, 0)
function pickSystem(): number {
  let x = draw() * weightSum
  for (let i = 0; i < weights.length; i++) if ((x -= weights[i]!) <= 0) return i
  return weights.length - 1
}

type Ending = 'done' | 'error-event' | 'truncated' | 'reset' | 'error-status' | 'aborted'

interface Rec {
  id: number
  system: number
  maxTokens: number
  /** Milliseconds since the load started. */
  start: number
  headersAt: number | undefined
  firstDataAt: number | undefined
  end: number
  status: number | undefined
  instance: string | undefined
  retries: number | undefined
  ending: Ending
  /** The error event's code, the error's code or message, or the start of an error body. */
  detail: string
}

const recs: Rec[] = []
let t0 = 0
const now = () => performance.now() - t0

async function one(pool: Pool, id: number, signal: AbortSignal): Promise<Rec> {
  const system = pickSystem()
  const maxTokens = MAX_TOKENS[0] + Math.floor(draw() * (MAX_TOKENS[1] - MAX_TOKENS[0] + 1))
  const rec: Rec = { id, system, maxTokens, start: now(), headersAt: undefined, firstDataAt: undefined, end: 0, status: undefined, instance: undefined, retries: undefined, ending: 'done', detail: '' }
  const body = JSON.stringify({
    model: MODEL,
    messages: [
      { role: 'system', content: systems[system] },
      { role: 'user', content: `Question ${id}: what does the policy say about item ${id % 997}?` },
    ],
    max_tokens: maxTokens,
    stream: true,
  })
  let sawDone = false
  let errorEvent: string | undefined
  try {
    const res = await pool.request({ path: '/v1/chat/completions', method: 'POST', headers: { 'content-type': 'application/json' }, body, signal })
    rec.headersAt = now()
    rec.status = res.statusCode
    const inst = res.headers['x-prefix-router-instance']
    rec.instance = typeof inst === 'string' ? inst : undefined
    const retries = res.headers['x-prefix-router-retries']
    rec.retries = typeof retries === 'string' ? Number(retries) : undefined
    if (res.statusCode !== 200) {
      rec.ending = 'error-status'
      rec.detail = (await res.body.text()).slice(0, 300)
      return rec
    }
    let buf = ''
    for await (const chunk of res.body) {
      rec.firstDataAt ??= now()
      buf += (chunk as Buffer).toString()
      let cut: number
      while ((cut = buf.indexOf('\n\n')) >= 0) {
        const event = buf.slice(0, cut)
        buf = buf.slice(cut + 2)
        for (const line of event.split('\n')) {
          if (!line.startsWith('data: ')) continue
          const data = line.slice(6)
          if (data === '[DONE]') sawDone = true
          else if (data.includes('"error"')) {
            try {
              const e = (JSON.parse(data) as { error?: { code?: string; message?: string } }).error
              if (e) errorEvent = `${e.code ?? 'error'}: ${e.message ?? ''}`
            } catch {
              errorEvent = data.slice(0, 200)
            }
          }
        }
      }
    }
    rec.ending = sawDone && errorEvent === undefined ? 'done' : errorEvent !== undefined ? 'error-event' : 'truncated'
    rec.detail = errorEvent ?? ''
  } catch (err) {
    const e = err as { code?: string; message?: string; name?: string }
    rec.ending = signal.aborted ? 'aborted' : errorEvent !== undefined ? 'error-event' : 'reset'
    rec.detail = errorEvent ?? `${e.code ?? e.name}: ${e.message ?? ''}`
  } finally {
    rec.end = now()
  }
  return rec
}

// ---- the router's side ------------------------------------------------------------------

/** User + system CPU seconds of a process so far. */
function cpuSeconds(pid: number): number {
  const f = readFileSync(`/proc/${pid}/stat`, 'utf8')
  const fields = f.slice(f.lastIndexOf(')') + 2).split(' ')
  return (Number(fields[11]) + Number(fields[12])) / 100
}

function rssKb(pid: number): number {
  const m = /^VmRSS:\s+(\d+)\s+kB/m.exec(readFileSync(`/proc/${pid}/status`, 'utf8'))
  return m ? Number(m[1]) : NaN
}

/** Counter samples of one metric, by their label sets. */
function counters(text: string, name: string): { labels: Record<string, string>; value: number }[] {
  const out: { labels: Record<string, string>; value: number }[] = []
  for (const line of text.split('\n')) {
    if (!line.startsWith(`${name}{`) && !line.startsWith(`${name} `)) continue
    const labels: Record<string, string> = {}
    for (const m of line.matchAll(/(\w+)="([^"]*)"/g)) labels[m[1]!] = m[2]!
    out.push({ labels, value: Number(line.slice(line.lastIndexOf(' ') + 1)) })
  }
  return out
}

interface RouterEvent {
  t: number
  msg: string
  instance: string
  reason: string
}

// ---- reporting ----------------------------------------------------------------------------

const s1 = (ms: number) => `${(ms / 1000).toFixed(1)} s`
const pct = (a: number, b: number) => (b === 0 ? '-' : `${((100 * a) / b).toFixed(2)}%`)
function quantile(xs: number[], q: number): number {
  if (xs.length === 0) return NaN
  const s = [...xs].sort((a, b) => a - b)
  return s[Math.min(s.length - 1, Math.floor(q * s.length))]!
}

async function main(): Promise<void> {
  const taken = new Set<number>()
  const ports: number[] = []
  for (let i = 0; i < WORKERS; i++) {
    const p = await freePort(taken)
    taken.add(p)
    ports.push(p)
  }
  const urls = ports.map((p) => `http://127.0.0.1:${p}`)
  const workers: Proc[] = await Promise.all(ports.map((p) => startWorker(p)))

  // Probes every second with a rise of 2, so that probes see the restarted worker within
  // 2-3 s (an outlier ejection still running holds it out longer). No drain delay: the bench
  // stops the router only once nothing is in flight.
  const configFile = join(tmp, 'router.json')
  writeFileSync(
    configFile,
    JSON.stringify({
      health: { intervalMs: 1000, timeoutMs: 500, healthyThreshold: 2, unhealthyThreshold: 2 },
      drain: { delayMs: 0, timeoutMs: 1000 },
    }),
  )
  const config: Config = parseConfig(readConfigFile(configFile))
  const events: RouterEvent[] = []
  let wall0 = 0
  const logLevels = new Map<string, number>()
  const routerArgs = [...NODE_FLAGS, 'dist/cli.js', 'serve', '--config', configFile, ...urls.flatMap((u) => ['--upstream', u]), '--host', '127.0.0.1', '--port', '0', '--admin-port', '0', '--debug-headers', '--log-level', 'warn']
  const router = await start('router', routerArgs, /on (http:\/\/[\d.:]+) \(admin (http:\/\/[\d.:]+)\)/, (line) => {
    if (!line.startsWith('{')) return
    try {
      const j = JSON.parse(line) as { time?: number; msg?: string; instance?: string; reason?: string; level?: number }
      logLevels.set(j.msg ?? '?', (logLevels.get(j.msg ?? '?') ?? 0) + 1)
      if (j.msg && j.instance && !/retrying/.test(j.msg)) events.push({ t: (j.time ?? Date.now()) - wall0, msg: j.msg, instance: j.instance, reason: j.reason ?? '' })
    } catch {
      // not a log line
    }
  })
  const [, routerUrl, adminUrl] = router.match
  const routerPid = router.child.pid!

  // The 503s start with the measured run (after the warm-up), so every request the fault
  // worker gets in it can fail.
  const faults = async () => {
    const fr = await request(`${urls[FAULTY]}/sim/faults`, { method: 'POST', headers: { 'content-type': 'application/json' }, body: JSON.stringify({ error_rate: ERROR_RATE, error_status: 503 }) })
    if (fr.statusCode !== 200) throw new Error(`POST /sim/faults answered ${fr.statusCode}: ${await fr.body.text()}`)
    await fr.body.dump()
  }

  const cpu = cpus()
  console.log(`prefix-router soak — machine: ${cpu.length} × ${cpu[0]?.model ?? 'unknown CPU'}; node ${process.version}`)
  console.log(`settings: ${CONCURRENCY} concurrent streaming chat completions for ${SECONDS} s; ${SYSTEM_PROMPTS} shared system prompts (4.5-7.5 k chars, Zipf-weighted), max_tokens ${MAX_TOKENS[0]}-${MAX_TOKENS[1]}`)
  console.log(`  ${WORKERS} sim workers (llama-3.1-70b-p5 profile, time scale 1), one process each: ${urls.join(' ')}`)
  console.log(`  worker ${urls[FAULTY]} answers 503 to ${ERROR_RATE * 100}% of requests from the start of the measured run`)
  console.log(`  worker ${urls[KILLED]} SIGKILLed at ${s1(KILL_MS)}, restarted on the same port at ${s1(RESTART_MS)}`)
  const { retries: rt, outlier: ol, health: hc } = config
  console.log(`  router ${routerUrl} (pid ${routerPid}, separate process, node ${NODE_FLAGS.join(' ') || '(no flags)'}), admin ${adminUrl}; strategy ${config.routing.strategy}`)
  console.log(`  retries max ${rt.max}, budget ${rt.budgetPercent}% (min ${rt.minRetryConcurrency}), per-try timeout ${rt.perTryTimeoutMs} ms, onReset ${rt.onReset}; outlier ${ol.consecutive5xx} × 5xx / ${ol.consecutiveGatewayFailure} × gateway, base ejection ${ol.baseEjectionTimeMs} ms, max ${ol.maxEjectionPercent}%; health every ${hc.intervalMs} ms (timeout ${hc.timeoutMs} ms, rise ${hc.healthyThreshold}, fall ${hc.unhealthyThreshold})`)
  console.log(`  warm-up: ${WARMUP} s of the same load on the healthy fleet, discarded; router RSS read when the measured run starts and when its load stops\n`)

  const pool = new Pool(routerUrl!, { connections: CONCURRENCY + 16, pipelining: 1, keepAliveTimeout: 30_000, headersTimeout: 60_000, bodyTimeout: 60_000 })
  const abort = new AbortController()
  // One signal ends every open request at the drain deadline; each holds a listener on it,
  // briefly two when a request ends as the next begins.
  setMaxListeners(2 * CONCURRENCY + 16, abort.signal)
  const rss: { t: number; kb: number }[] = []
  let killAt = NaN
  let deadAt = NaN
  let restartAt = NaN
  let backAt = NaN
  let rssStart = NaN
  let rssEnd = NaN
  let nextId = 0
  let stopping = false

  if (WARMUP > 0) {
    let warm = true
    const warmLoops = Array.from({ length: CONCURRENCY }, async () => {
      while (warm) await one(pool, -1, abort.signal)
    })
    await new Promise((r) => setTimeout(r, WARMUP * 1000))
    warm = false
    await Promise.all(warmLoops)
  }
  await faults()

  t0 = performance.now()
  wall0 = Date.now()
  rssStart = rssKb(routerPid)
  const cpu0 = cpuSeconds(routerPid)
  // V8's heap in use, from the router's own metrics: RSS also holds garbage not yet collected
  // and memory the allocator keeps, so the two together tell growth from a leak.
  const heap: { t: number; mb: number }[] = []
  const heapUsed = async () =>
    Number(/^nodejs_heap_size_used_bytes (\S+)$/m.exec(await (await request(`${adminUrl}/metrics`)).body.text())?.[1] ?? NaN) / 2 ** 20
  const rssTimer = setInterval(() => {
    rss.push({ t: now(), kb: rssKb(routerPid) })
    const t = now()
    void heapUsed().then((mb) => heap.push({ t, mb }), () => undefined)
  }, 1000)
  // Probe recoveries and returns after ejection are logged at info, which would also log every
  // request; the admin port's view of each instance, polled, shows when rotation changed.
  const rotation = new Map<string, string>()
  let polling = false
  const pollTimer = setInterval(() => {
    if (polling) return
    polling = true
    void request(`${adminUrl}/admin/instances`)
      .then((r) => r.body.json() as Promise<{ endpoints: { instances: { id: string; healthy: boolean; ejectedUntil: string | null }[] }[] }>)
      .then((j) => {
        for (const i of j.endpoints[0]?.instances ?? []) {
          const state = i.healthy && i.ejectedUntil === null ? 'in rotation' : `out of rotation (${[!i.healthy && 'probes down', i.ejectedUntil !== null && 'ejected'].filter(Boolean).join(', ')})`
          if (rotation.get(i.id) !== state) {
            if (rotation.has(i.id) || state !== 'in rotation') events.push({ t: now(), msg: `admin: ${state}`, instance: i.id, reason: '' })
            rotation.set(i.id, state)
          }
        }
      })
      .catch(() => undefined)
      .finally(() => (polling = false))
  }, 500)
  const timers: NodeJS.Timeout[] = [
    setTimeout(() => {
      const w = workers[KILLED]!
      w.child.once('exit', () => (deadAt = now()))
      killAt = now()
      w.child.kill('SIGKILL')
    }, KILL_MS),
    setTimeout(() => {
      restartAt = now()
      void startWorker(ports[KILLED]!).then(
        (w) => {
          workers[KILLED] = w
          backAt = now()
        },
        (err: unknown) => console.error(`soak: restarting the killed worker failed: ${String(err)}`),
      )
    }, RESTART_MS),
  ]
  const loops = Array.from({ length: CONCURRENCY }, async () => {
    while (!stopping) recs.push(await one(pool, nextId++, abort.signal))
  })
  await new Promise((r) => setTimeout(r, SECONDS * 1000))
  stopping = true
  rssEnd = rssKb(routerPid)
  const stoppedAt = now()
  const routerCpu = cpuSeconds(routerPid) - cpu0
  const drainTimer = setTimeout(() => abort.abort(), DRAIN_MS)
  await Promise.all(loops)
  clearTimeout(drainTimer)
  const drainedAt = now()
  clearInterval(rssTimer)
  clearInterval(pollTimer)
  for (const t of timers) clearTimeout(t)

  const metrics = await (await request(`${adminUrl}/metrics`)).body.text()
  await pool.close()

  // ---- the report -------------------------------------------------------------------------
  const killedId = urls[KILLED]!
  const faultyId = urls[FAULTY]!
  const ok = recs.filter((r) => r.ending === 'done')
  const failed = recs.filter((r) => r.ending !== 'done')
  const lastAnswered503 = (r: Rec) => /last answered 503/.test(r.detail)
  const CUT = 'stream cut on the killed worker'
  const UNANSWERED = 'sent to the killed worker, unanswered when it died (a reset after sending: not retried, retries.onReset is off)'
  const classify = (r: Rec): string => {
    // A response from the killed worker's port between the kill and the restart can only have
    // come from the old process, written before it died.
    if (r.instance === killedId && r.status === 200 && r.headersAt! < restartAt && r.end >= killAt) return CUT
    // The router names the instance on its own error answers too (debug headers).
    if (r.instance === killedId && r.status === 502 && /upstream_reset/.test(r.detail) && r.start <= deadAt && r.end >= killAt) return UNANSWERED
    if (r.status === 503 && r.instance === faultyId) return 'from the 503 worker (its 503 passed to the client)'
    if (r.status === 503 && r.instance === undefined && lastAnswered503(r)) return "from the 503 worker (503 after every try; the router's error, no instance header)"
    if (r.instance === faultyId) return `on the 503 worker: ${r.ending}${r.status !== 200 ? ` ${r.status}` : ''}`
    if (r.ending === 'error-status') return `error status ${r.status}${r.instance ? ` from ${r.instance}` : ''}${/"code":"(\w+)"/.exec(r.detail)?.[1] ? ` (${/"code":"(\w+)"/.exec(r.detail)![1]})` : ''}`
    if (r.ending === 'reset') return r.headersAt === undefined ? 'reset before any response' : `reset mid-stream${r.instance ? ` on ${r.instance}` : ''}`
    if (r.ending === 'error-event') return `error event${r.instance ? ` on ${r.instance}` : ''}`
    if (r.ending === 'truncated') return `ended without [DONE]${r.instance ? ` on ${r.instance}` : ''}`
    return `aborted by the bench (still open ${DRAIN_MS / 1000} s after the load stopped)`
  }
  const byClass = new Map<string, Rec[]>()
  for (const r of failed) {
    const c = classify(r)
    byClass.set(c, [...(byClass.get(c) ?? []), r])
  }

  console.log(`load: ${s1(stoppedAt)} of load, then ${s1(drainedAt - stoppedAt)} for the requests still open to end`)
  console.log(`killed worker: SIGKILL at ${s1(killAt)} (exited at ${s1(deadAt)}); restart at ${s1(restartAt)}, listening at ${s1(backAt)}`)
  console.log(`requests sent:      ${recs.length}  (${(recs.length / (stoppedAt / 1000)).toFixed(0)}/s)`)
  console.log(`completed:          ${ok.length}  (${pct(ok.length, recs.length)}) — ended with data: [DONE]`)
  console.log(`failed:             ${failed.length}  (${pct(failed.length, recs.length)})`)
  for (const [c, rs] of [...byClass].sort((a, b) => b[1].length - a[1].length)) console.log(`  ${String(rs.length).padStart(6)}  ${c}`)

  const dur = ok.map((r) => r.end - r.start)
  const ttfb = ok.filter((r) => r.firstDataAt !== undefined).map((r) => r.firstDataAt! - r.start)
  console.log(`completed latency:  first data p50 ${quantile(ttfb, 0.5).toFixed(0)} ms, p99 ${quantile(ttfb, 0.99).toFixed(0)} ms; whole answer p50 ${quantile(dur, 0.5).toFixed(0)} ms, p99 ${quantile(dur, 0.99).toFixed(0)} ms`)

  const slow = ok.filter((r) => r.firstDataAt !== undefined).sort((a, b) => b.firstDataAt! - b.start - (a.firstDataAt! - a.start)).slice(0, 5)
  console.log(`  slowest first data: ${slow.map((r) => `${(r.firstDataAt! - r.start).toFixed(0)} ms (start ${s1(r.start)}, ${r.instance}${r.retries ? `, ${r.retries} retries` : ''})`).join('; ')}`)
  const perInstance = new Map<string, number>()
  for (const r of ok) perInstance.set(r.instance ?? '(none)', (perInstance.get(r.instance ?? '(none)') ?? 0) + 1)
  console.log(`completed by instance: ${urls.map((u, i) => `${u}${i === KILLED ? ' (killed)' : i === FAULTY ? ' (503s)' : ''} ${perInstance.get(u) ?? 0}`).join(', ')}`)

  // Where the completed answers came from over time: the outage and the ejections show here.
  const bucket = (SECONDS * 1000) / 6
  const buckets = Array.from({ length: 6 }, (_, b) => b)
  console.log(`completed by instance and start time (${s1(bucket)} windows):`)
  for (const [i, u] of urls.entries()) {
    const n = buckets.map((b) => ok.filter((r) => r.instance === u && Math.min(5, Math.floor(r.start / bucket)) === b).length)
    console.log(`    ${u.padEnd(24)}${n.map((x) => String(x).padStart(6)).join('')}${i === KILLED ? '   (killed)' : i === FAULTY ? '   (503s)' : ''}`)
  }
  const answered = counters(metrics, 'prefix_router_requests_total').filter((c) => c.labels.status !== '200' && c.value > 0)
  console.log(`router's non-200 answers (prefix_router_requests_total, by the last instance tried): ${answered.map((c) => `${c.labels.instance || '(none)'} ${c.labels.status}: ${c.value}`).join(', ') || 'none'}`)

  const retriedRecs = recs.filter((r) => (r.retries ?? 0) > 0)
  const retryHist = new Map<number, number>()
  for (const r of retriedRecs) retryHist.set(r.retries!, (retryHist.get(r.retries!) ?? 0) + 1)
  const afterFaulty = recs.filter((r) => r.instance === faultyId && r.status === 200).length
  console.log(`retried (x-prefix-router-retries > 0): ${retriedRecs.length} responses (${[...retryHist].sort((a, b) => a[0] - b[0]).map(([n, c]) => `${c} × ${n}`).join(', ') || 'none'}); ${retriedRecs.filter((r) => r.ending === 'done').length} of them completed`)
  // The retry budget counts retries in flight against requests in flight; as a client sees
  // them, a retried request is in flight from its start to its end (its first try is short).
  const inFlightAt = (t: number, rs: Rec[]) => rs.filter((r) => r.start <= t && r.end > t).length
  let peak = { n: 0, t: 0 }
  for (const r of retriedRecs) {
    const n = inFlightAt(r.start, retriedRecs)
    if (n > peak.n) peak = { n, t: r.start }
  }
  console.log(`  retried requests in flight: at most ${peak.n} (at ${s1(peak.t)}); just before the kill ${inFlightAt(killAt, retriedRecs)} of ${inFlightAt(killAt, recs)} in flight (budget: ${rt.budgetPercent}% of requests in flight, at least ${rt.minRetryConcurrency})`)
  const retries = counters(metrics, 'prefix_router_retries_total')
  const byReason = new Map<string, number>()
  for (const c of retries) byReason.set(c.labels.reason!, (byReason.get(c.labels.reason!) ?? 0) + c.value)
  console.log(`retried (router, prefix_router_retries_total): ${retries.reduce((a, c) => a + c.value, 0)} — by reason: ${[...byReason].map(([k, v]) => `${k} ${v}`).join(', ') || 'none'}`)
  for (const c of retries) console.log(`    ${c.labels.instance} ${c.labels.reason}: ${c.value}`)
  const ej = counters(metrics, 'prefix_router_ejections_total')
  console.log(`ejections (prefix_router_ejections_total): ${ej.reduce((a, c) => a + c.value, 0)}${ej.map((c) => `\n    ${c.labels.instance} ${c.labels.reason}: ${c.value}`).join('')}`)
  console.log(`answers from the 503 worker that reached the client as 200: ${afterFaulty} (an ejected instance gets none)`)
  const back = recs.filter((r) => r.instance === killedId && r.headersAt !== undefined && r.headersAt >= backAt).map((r) => r.headersAt!)
  console.log(`killed worker after its restart: ${back.length > 0 ? `first response from it at ${s1(Math.min(...back))} (${s1(Math.min(...back) - backAt)} after it listened again); ${recs.filter((r) => r.instance === killedId && r.start >= backAt && r.ending === 'done').length} completed on it` : 'no request reached it before the load stopped'}`)
  if (events.length > 0) {
    console.log('router events (warn log, and state changes seen on /admin/instances every 0.5 s):')
    events.sort((a, b) => a.t - b.t)
    for (const e of events) console.log(`    ${s1(e.t).padStart(7)}  ${e.instance}  ${e.msg}${e.reason ? ` (${e.reason.slice(0, 100)})` : ''}`)
  }
  console.log(`router log lines at warn and above: ${[...logLevels].map(([m, n]) => `${n} × '${m}'`).join(', ') || 'none'}`)

  const growth = (100 * (rssEnd - rssStart)) / rssStart
  const series = rss.filter((_, i) => i % Math.max(1, Math.round(SECONDS / 12)) === 0).map((s) => `${s1(s.t)} ${(s.kb / 1024).toFixed(0)}`)
  console.log(`router RSS: start ${(rssStart / 1024).toFixed(1)} MiB (as the measured run began, after the warm-up), end ${(rssEnd / 1024).toFixed(1)} MiB (at ${s1(stoppedAt)}), growth ${growth.toFixed(1)}%, peak ${(Math.max(...rss.map((s) => s.kb)) / 1024).toFixed(1)} MiB`)
  console.log(`  MiB over time: ${series.join(', ')}`)
  const heapSeries = heap.filter((_, i) => i % Math.max(1, Math.round(SECONDS / 12)) === 0).map((h) => `${s1(h.t)} ${h.mb.toFixed(0)}`)
  console.log(`  V8 heap in use (MiB; rises and falls with collections): ${heapSeries.join(', ')}`)
  // Not a target: whether the growth is a ramp that ends (the heap settling) or keeps going.
  const half = rss.filter((x) => x.t >= stoppedAt / 2 && x.t <= stoppedAt)
  if (half.length > 1) console.log(`  second half alone (${s1(half[0]!.t)} to ${s1(half[half.length - 1]!.t)}): ${(half[0]!.kb / 1024).toFixed(1)} to ${(half[half.length - 1]!.kb / 1024).toFixed(1)} MiB (${((100 * (half[half.length - 1]!.kb - half[0]!.kb)) / half[0]!.kb).toFixed(1)}%)`)
  console.log(`router CPU: ${routerCpu.toFixed(1)} s over ${s1(stoppedAt)} of load (${((100 * routerCpu) / (stoppedAt / 1000)).toFixed(0)}% of one core; the machine has ${cpu.length}, shared with the 4 workers and this load generator)`)

  // ---- the targets ------------------------------------------------------------------------
  const cut = byClass.get(CUT) ?? []
  const unanswered = byClass.get(UNANSWERED) ?? []
  const others = failed.filter((r) => classify(r) !== CUT && classify(r) !== UNANSWERED)
  const from503 = failed.filter((r) => classify(r).startsWith('from the 503 worker'))
  const t1 = others.length === 0
  const t2 = from503.length === 0
  const t3 = growth < 10
  console.log('\ntargets:')
  console.log(
    `  ${t1 ? 'PASS' : 'FAIL'}  (1) failures only among requests in flight on the killed worker when it died: ${cut.length} streaming, ${unanswered.length} sent and not yet answered; ${others.length} other`,
  )
  console.log(`  ${t2 ? 'PASS' : 'FAIL'}  (2) no failure from the 503 worker: ${from503.length}`)
  console.log(`  ${t3 ? 'PASS' : 'FAIL'}  (3) router RSS growth under 10%: ${growth.toFixed(1)}%`)
  if (cut.length > 0) {
    const lag = cut.map((r) => r.end - killAt)
    console.log(`\nstreams cut on the killed worker: response headers ${s1(Math.min(...cut.map((r) => r.headersAt!)))}-${s1(Math.max(...cut.map((r) => r.headersAt!)))}, ended ${Math.min(...lag).toFixed(0)}-${Math.max(...lag).toFixed(0)} ms after the kill; how: ${[...new Set(cut.map((r) => `${r.ending} ${r.detail.slice(0, 140)}`))].slice(0, 3).join(' | ')}`)
  }
  if (others.length > 0) {
    console.log(`\nfailures outside target (1), up to 5 of each kind (times since the load started; hdr: response headers; data: first byte):`)
    for (const [c, rs] of byClass) {
      if (c === CUT || c === UNANSWERED) continue
      console.log(`  ${c}: ${rs.length}, started ${s1(Math.min(...rs.map((r) => r.start)))}-${s1(Math.max(...rs.map((r) => r.start)))}`)
      for (const r of rs.slice(0, 5)) {
        console.log(
          `    #${r.id} start ${s1(r.start)} hdr ${r.headersAt === undefined ? '-' : s1(r.headersAt)} data ${r.firstDataAt === undefined ? '-' : s1(r.firstDataAt)} end ${s1(r.end)}  status ${r.status ?? '-'} instance ${r.instance ?? '-'} retries ${r.retries ?? '-'} ${r.ending}: ${r.detail.replace(/\s+/g, ' ').slice(0, 160)}`,
        )
      }
    }
  }
}

let exitCode = 0
main()
  .catch((err: unknown) => {
    console.error('soak: could not run:', err)
    exitCode = 1
  })
  .finally(async () => {
    killAll('SIGTERM')
    const left = [...children]
    await Promise.race([Promise.all(left.map((c) => new Promise((r) => c.once('exit', r)))), new Promise((r) => setTimeout(r, 3000))])
    process.exit(exitCode)
  })
