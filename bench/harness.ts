// What the benchmarks share: child processes that say when they are ready, the request body
// they send, the machine they describe, the CPU time they read, and batched call timing.
import { execFileSync, spawn, type SpawnOptions } from 'node:child_process'
import { readdirSync, readFileSync } from 'node:fs'
import { availableParallelism, cpus, platform, release } from 'node:os'
import { Bench } from 'tinybench'

export interface Started {
  /** The ready pattern's match. */
  match: RegExpExecArray
  pid: number
  /** What it printed so far: the watched stream, then the other. */
  output(): string
  /** SIGTERM, and resolves once it exited. */
  stop(): Promise<void>
}

const live = new Set<() => void>()
// A benchmark that fails half-way must not leave routers and stubs running.
process.once('exit', () => {
  for (const kill of live) kill()
})

/** Starts `cmd args` and resolves once `stream` matches `ready`; rejects if it exits first or is not ready within `readyMs`. */
export function startProcess(cmd: string, args: string[], ready: RegExp, stream: 'stdout' | 'stderr', opts: SpawnOptions = {}, readyMs = 120_000): Promise<Started> {
  const child = spawn(cmd, args, { ...opts, stdio: ['ignore', 'pipe', 'pipe'] })
  const kill = () => child.kill('SIGKILL')
  live.add(kill)
  let out = ''
  let other = ''
  const exited = new Promise<void>((r) => child.once('exit', () => r()))
  void exited.then(() => live.delete(kill))
  return new Promise((resolve, reject) => {
    let matched = false
    const timer = setTimeout(() => {
      if (matched) return
      kill()
      reject(new Error(`${cmd} ${args.join(' ')} printed nothing matching ${ready} within ${readyMs} ms: ${out}`))
    }, readyMs)
    timer.unref()
    child[stream]!.on('data', (d: Buffer) => {
      // What comes after the ready line is kept only up to a bound: a router's log can run for minutes.
      if (!matched || out.length < 1 << 20) out += d.toString()
      const m = matched ? null : ready.exec(out)
      if (!m) return
      matched = true
      clearTimeout(timer)
      resolve({
        match: m,
        pid: child.pid!,
        output: () => `${out}${other}`,
        stop: async () => {
          if (child.exitCode === null && child.signalCode === null) child.kill('SIGTERM')
          await exited
        },
      })
    })
    // The other stream is read too, so that a chatty child never blocks on a full pipe.
    child[stream === 'stdout' ? 'stderr' : 'stdout']!.on('data', (d: Buffer) => {
      if (other.length < 1 << 20) other += d.toString()
    })
    child.once('exit', (c) => reject(new Error(`${cmd} ${args.join(' ')} exited ${c}: ${out}`)))
  })
}

const SYSTEM = 'You are the support assistant of a large retailer; answer from the policy below. '.repeat(96).slice(0, 7900)

/** An 8 KiB chat body: a long shared system prompt and a short question. */
export function chatBody(i: number, stream: boolean): string {
  return JSON.stringify({ model: 'stub', messages: [{ role: 'system', content: SYSTEM }, { role: 'user', content: `question ${i}` }], max_tokens: 8, stream })
}

/** The machine, as Node sees it: a result means little without it. */
export function machine(): string {
  const c = cpus()
  const models = [...new Set(c.map((x) => x.model.trim()))].join(', ')
  return `${c.length} CPU(s) (${models || 'unknown model'}${c[0]?.speed ? `, ${c[0].speed} MHz` : ''}), availableParallelism ${availableParallelism()}, ${platform()} ${release()}, node ${process.version}`
}

let ticks: number | undefined
const clockTicks = (): number => {
  if (ticks === undefined) {
    try {
      ticks = Number(execFileSync('getconf', ['CLK_TCK'], { encoding: 'utf8' }).trim()) || 100
    } catch {
      ticks = 100
    }
  }
  return ticks
}

/**
 * CPU time (user + system, ms) of `pid` and all its descendants (cluster workers, nginx's
 * workers), from /proc; undefined where /proc is not there.
 */
export function treeCpuMs(pid: number): number | undefined {
  let entries: string[]
  try {
    entries = readdirSync('/proc').filter((d) => /^\d+$/.test(d))
  } catch {
    return undefined
  }
  const stats = new Map<number, { ppid: number; cpu: number }>()
  for (const d of entries) {
    try {
      const s = readFileSync(`/proc/${d}/stat`, 'utf8')
      // The command name may hold spaces and brackets: fields are counted after its last ')'.
      const f = s.slice(s.lastIndexOf(')') + 2).split(' ')
      stats.set(Number(d), { ppid: Number(f[1]), cpu: Number(f[11]) + Number(f[12]) })
    } catch {
      // exited meanwhile
    }
  }
  if (!stats.has(pid)) return undefined
  let total = 0
  const queue = [pid]
  while (queue.length > 0) {
    const p = queue.pop()!
    total += stats.get(p)?.cpu ?? 0
    for (const [child, s] of stats) if (s.ppid === p) queue.push(child)
  }
  return (total * 1000) / clockTicks()
}

export interface PerCall {
  meanNs: number
  medianNs: number
}

/**
 * Times fn with tinybench (its warm-up discarded), in batches sized from estimateNs so that one
 * sample lasts about targetUs: the timer's resolution would swamp a sub-microsecond call.
 */
export async function perCall(name: string, fn: () => void, estimateNs: number, o: { timeMs: number; warmupMs: number; targetUs: number }): Promise<PerCall> {
  const batch = Math.max(1, Math.round((o.targetUs * 1000) / estimateNs))
  const bench = new Bench({ time: o.timeMs, warmupTime: o.warmupMs })
  bench.add(name, () => {
    for (let i = 0; i < batch; i++) fn()
  })
  await bench.run()
  const r = bench.tasks[0]!.result
  if (r.state !== 'completed') throw new Error(`${name}: ${r.state}`)
  return { meanNs: (r.latency.mean * 1e6) / batch, medianNs: (r.latency.p50 * 1e6) / batch }
}
