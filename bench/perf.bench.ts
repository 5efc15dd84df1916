// Where each proxy's CPU goes per request at bench:proxy's open-loop rate, the whole process
// counted: the kernel, Node and V8 (the `node` binary: builtins, the runtime, the garbage
// collector, libuv, llhttp), the JavaScript the JIT compiled, libc and the native addon.
// V8's own profiler (bench:profile) sees the JavaScript and charges builtins to their callers;
// this samples with Linux perf (software cpu-clock, which needs no hardware counters), so what
// the router spends above node-floor and the ladder's metrics level (bench:ladder) can be
// split into the kernel's, V8's and the JavaScript's.
//
// The three proxies run with --perf-basic-prof (each writes /tmp/perf-<pid>.map, so that perf
// can name JIT code; the maps are removed at the end), take a discarded warm-up turn, then
// ROUNDS turns of open-loop load in quarter-second slots in rotation while a `perf record` for
// each samples it. The stub runs without perf. Sampling costs each process a little; the three
// pay alike.
// CALLERS=symbol records call chains as well and prints, for each proxy, the compiled functions
// that the samples in that symbol were taken under (the first JavaScript frame above it), e.g.
// CALLERS=Builtins_LoadIC_Megamorphic.
// Run: npm run bench:perf   (RATE=1000 DURATION_S=10 ROUNDS=5 FREQ=2000 TOP=20 CALLERS=; needs
// perf: apt-get install -y linux-perf, and perf_event_paranoid ≤ 2 or root)
import { execFileSync, spawn } from 'node:child_process'
import { rmSync } from 'node:fs'
import { h1Sender, machine, openLoop, rotate, sample, startNodeScript, startServe, stopStarted, type Sender } from './harness.js'

const RATE = Number(process.env.RATE ?? 1000)
const DURATION_S = Number(process.env.DURATION_S ?? 10)
const ROUNDS = Number(process.env.ROUNDS ?? 5)
const FREQ = Number(process.env.FREQ ?? 2000)
const TOP = Number(process.env.TOP ?? 20)
const CALLERS = process.env.CALLERS || undefined
for (const [name, v] of Object.entries({ RATE, DURATION_S, ROUNDS, FREQ, TOP })) {
  if (!(v > 0) || !Number.isFinite(v)) throw new Error(`${name} must be a positive number, not ${JSON.stringify(process.env[name])}`)
}

function perfVersion(): string | undefined {
  try {
    return execFileSync('perf', ['--version'], { encoding: 'utf8', stdio: ['ignore', 'pipe', 'ignore'] }).trim()
  } catch {
    return undefined
  }
}

/** What a shared object's samples are counted as. */
function part(dso: string): string {
  if (dso.startsWith('[kernel')) return 'kernel'
  // `[JIT] tid <pid>`, or `perf-<pid>.map` in older perf.
  if (dso.startsWith('[JIT]') || dso.startsWith('perf-')) return 'JavaScript (JIT)'
  if (dso === 'node') return 'node (V8, Node, libuv)'
  if (dso.startsWith('libc.')) return 'libc'
  if (dso === 'prefix-router.node') return 'addon'
  return 'other'
}

interface Profile {
  /** CPU time sampled, in ns. */
  ns: number
  byPart: Map<string, number>
  bySymbol: Map<string, number>
}

/** One process's samples: perf report's event count and percentages, by shared object and by symbol. */
function report(data: string): Profile {
  const run = (sort: string) =>
    execFileSync('perf', ['report', '-i', data, '--no-children', '--sort', sort, '--stdio', '-g', 'none', '--percent-limit', '0.05'], {
      encoding: 'utf8',
      maxBuffer: 64 << 20,
      stdio: ['ignore', 'pipe', 'ignore'],
    })
  const byDso = run('dso')
  const ns = Number(/Event count \(approx\.\): (\d+)/.exec(byDso)?.[1] ?? 0)
  const byPart = new Map<string, number>()
  for (const m of byDso.matchAll(/^\s+([\d.]+)%\s+(\S.*?)\s*$/gm)) {
    const p = part(m[2]!)
    byPart.set(p, (byPart.get(p) ?? 0) + (Number(m[1]) / 100) * ns)
  }
  const bySymbol = new Map<string, number>()
  for (const m of run('sym').matchAll(/^\s+([\d.]+)%\s+\[.\]\s+(\S.*?)\s*$/gm)) {
    // JIT code is named with its file and position; the address part of a name varies by run.
    const name = m[2]!.replace(/\+0x[0-9a-f]+$/, '')
    bySymbol.set(name, (bySymbol.get(name) ?? 0) + (Number(m[1]) / 100) * ns)
  }
  return { ns, byPart, bySymbol }
}

/** For the samples whose innermost frame is `symbol`: how many were under each first JIT frame above it. */
function callersOf(data: string, symbol: string): Map<string, number> {
  const script = execFileSync('perf', ['script', '-i', data, '-F', 'ip,sym'], { encoding: 'utf8', maxBuffer: 1 << 30, stdio: ['ignore', 'pipe', 'ignore'] })
  const counts = new Map<string, number>()
  for (const sample of script.split(/\n\s*\n/)) {
    const frames = sample.trim().split('\n').map((l) => l.trim().replace(/^[0-9a-f]+\s+/, ''))
    if (!frames[0]?.startsWith(symbol)) continue
    const caller = frames.slice(1).find((f) => f.startsWith('JS:')) ?? '(no compiled caller)'
    const name = caller.replace(/\+0x[0-9a-f]+$/, '')
    counts.set(name, (counts.get(name) ?? 0) + 1)
  }
  return counts
}

async function main(): Promise<void> {
  const version = perfVersion()
  if (version === undefined) {
    console.log('skipped: perf is not installed (apt-get install -y linux-perf)')
    return
  }
  const stub = await startNodeScript(['bench/stub-upstream.mjs'])
  const upstream = `http://127.0.0.1:${stub.match[1]}`
  const prof = '--perf-basic-prof'
  const floor = await startNodeScript([prof, 'bench/peers/node-floor.mjs', upstream, '1'])
  const metrics = await startNodeScript([prof, 'bench/peers/node-proxy.mjs', upstream, 'metrics'], { PATHS: 'serve' })
  const router = await startServe(upstream, 1, [prof])
  const proxies = [
    { name: 'node-floor', pid: floor.pid!, url: `http://127.0.0.1:${floor.match[1]}` },
    { name: 'metrics', pid: metrics.pid!, url: `http://127.0.0.1:${metrics.match[1]}` },
    { name: 'router', pid: router.pid!, url: router.match[1]! },
  ]
  console.log(`prefix-router CPU by part, sampled with perf — ${machine()}; ${version}`)
  console.log(`open loop ${RATE} req/s, 8 KiB chat bodies, HTTP/1.1 JSON answers; a discarded turn per proxy, then ${ROUNDS} turns of ${+(DURATION_S / ROUNDS).toFixed(2)} s in slots in rotation, perf record -e cpu-clock -F ${FREQ} over all of them`)
  console.log('node-floor: bench/peers/node-floor.mjs; metrics: the ladder\'s top level (bench/peers/node-proxy.mjs metrics, PATHS=serve), a correct router without this one\'s extras; router: serve --log-level warn')

  const senders = proxies.map((p): [string, Sender] => [p.name, h1Sender(p.url)])
  for (const [, s] of senders) await openLoop(s, false, RATE, DURATION_S / ROUNDS, sample())
  // One recording per process (perf report's totals are a recording's, whichever pid it shows).
  const data = (name: string) => `/tmp/prefix-router-perf-${process.pid}-${name}.data`
  const recs = proxies.map((p) => spawn('perf', ['record', '-q', '-e', 'cpu-clock', '-F', String(FREQ), ...(CALLERS ? ['-g'] : []), '-p', String(p.pid), '-o', data(p.name)], { stdio: 'ignore' }))
  // perf opens its counters before it starts sampling; what it misses of the first slot only thins that slot.
  await new Promise((r) => setTimeout(r, 500))
  const sent = new Map<string, number>()
  await rotate(senders, false, { rate: RATE, turn: DURATION_S / ROUNDS, rounds: ROUNDS, alternate: true, onSlot: (name, phase, n) => phase === 'end' && sent.set(name, (sent.get(name) ?? 0) + n) }, () => sample())
  await Promise.all(recs.map((rec) => new Promise((r) => rec.once('exit', r).kill('SIGINT'))))
  for (const [, s] of senders) await s.close()
  // The warm-up turn is not sampled; rotate's own discarded turn is, so it counts in the requests.
  for (const p of proxies) sent.set(p.name, (sent.get(p.name) ?? 0) + Math.round(RATE * (DURATION_S / ROUNDS)))

  const profiles = new Map(proxies.map((p) => [p.name, report(data(p.name))]))
  const perRequest = (name: string, ns: number) => ns / 1000 / sent.get(name)!
  const cols = proxies.map((p) => p.name)
  const W = 56
  const row = (label: string, f: (name: string) => number) => {
    const v = cols.map(f)
    const cells = v.map((x) => x.toFixed(1).padStart(11))
    return `${label.padEnd(W)}${cells.join('')}${(v[2]! - v[0]!).toFixed(1).padStart(16)}${(v[2]! - v[1]!).toFixed(1).padStart(15)}`
  }
  console.log(`\nCPU per request, µs (samples of the whole process, every thread)`)
  console.log(`${''.padEnd(W)}${cols.map((c) => c.padStart(11)).join('')}${'router − floor'.padStart(16)}${'router − metr.'.padStart(15)}`)
  console.log(row('all', (n) => perRequest(n, profiles.get(n)!.ns)))
  for (const p of ['kernel', 'node (V8, Node, libuv)', 'JavaScript (JIT)', 'libc', 'addon', 'other']) console.log(row(`  ${p}`, (n) => perRequest(n, profiles.get(n)!.byPart.get(p) ?? 0)))

  const symbols = new Set(cols.flatMap((n) => [...profiles.get(n)!.bySymbol.keys()]))
  const sym = (n: string, s: string) => perRequest(n, profiles.get(n)!.bySymbol.get(s) ?? 0)
  const ranked = [...symbols].sort((a, b) => sym('router', b) - sym('node-floor', b) - (sym('router', a) - sym('node-floor', a)))
  console.log(`\nthe ${TOP} symbols the router spends most above node-floor on, µs per request (symbols under 0.05% of a process's samples count as 0)`)
  console.log(`${''.padEnd(W)}${cols.map((c) => c.padStart(11)).join('')}${'router − floor'.padStart(16)}${'router − metr.'.padStart(15)}`)
  // JIT names carry the file's whole path: the part under the repository says enough.
  const short = (s: string) => s.replace(/(file:\/\/)?\/\S*?\/(dist|node_modules|bench)\//, '$2/')
  for (const s of ranked.slice(0, TOP)) {
    const l = short(s)
    console.log(row(l.length > W - 1 ? `${l.slice(0, W - 2)}…` : l, (n) => sym(n, s)))
  }
  if (CALLERS) {
    for (const p of proxies) {
      const callers = callersOf(data(p.name), CALLERS)
      const total = [...callers.values()].reduce((a, b) => a + b, 0)
      console.log(`\n${p.name}: where its ${total} samples in ${CALLERS} were taken (the first compiled function above it)`)
      for (const [fn, n] of [...callers].sort((a, b) => b[1] - a[1]).slice(0, TOP)) console.log(`  ${String(n).padStart(5)}  ${short(fn)}`)
    }
  }
  console.log('\n(JIT code is named by V8\'s perf map: `*` optimised, `^` baseline, `~` interpreted; a map entry can outlive its code, so a JIT name is a hint)')

  for (const p of proxies) {
    rmSync(data(p.name), { force: true })
    rmSync(`/tmp/perf-${p.pid}.map`, { force: true })
  }
}

main()
  .catch((err) => {
    console.error(err)
    process.exitCode = 1
  })
  .finally(async () => {
    await stopStarted()
  })
