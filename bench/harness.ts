// What the benchmarks share: child processes that say when they are ready, the request body
// they send, the machine they describe, the CPU time they read, batched call timing, and the
// open- and closed-loop HTTP load the proxy benchmarks send.
import { execFileSync, spawn, type SpawnOptions } from 'node:child_process'
import { readdirSync, readFileSync } from 'node:fs'
import { availableParallelism, cpus, platform, release } from 'node:os'
import { fileURLToPath } from 'node:url'
import * as hdr from 'hdr-histogram-js'
import { Bench } from 'tinybench'
import { Client } from 'undici'

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

const root = fileURLToPath(new URL('..', import.meta.url))

const running: Started[] = []

async function kept(p: Promise<Started>): Promise<Started> {
  const s = await p
  running.push(s)
  return s
}

/** Stops, and waits for, every process startNodeScript and startServe started. */
export async function stopStarted(): Promise<void> {
  await Promise.all(running.splice(0).map((p) => p.stop()))
}

/** `node <args>` from the repository's root, ready once it prints "listening <port>" (the port is match[1]). */
export function startNodeScript(args: string[], env?: NodeJS.ProcessEnv): Promise<Started> {
  return kept(startProcess(process.execPath, args, /listening (\d+)/, 'stdout', { cwd: root, ...(env && { env: { ...process.env, ...env } }) }))
}

/** `prefix-router serve` from dist/ in front of `upstream`, ready once it prints its URL (match[1]); `nodeFlags` go to node before the bin's own. */
export function startServe(upstream: string, workers: number, nodeFlags: string[] = []): Promise<Started> {
  const args = [...nodeFlags, '--initial-old-space-size=128', 'dist/cli.js', 'serve', '--upstream', upstream, '--port', '0', '--admin-port', '0', '--host', '127.0.0.1', '--log-level', 'warn']
  if (workers > 1) args.push('--workers', String(workers))
  return kept(startProcess(process.execPath, args, /on (http:\/\/[\d.:]+) \(admin/, 'stderr', { cwd: root }))
}

/** Latencies in µs, from 1 µs to a minute. */
export const histogram = () => hdr.build({ lowestDiscernibleValue: 1, highestTrackableValue: 60_000_000, numberOfSignificantValueDigits: 3 })

export interface Sender {
  /**
   * One chat request; resolves with when its first and last response bytes came, and when the
   * stub had the whole request if it said so (`stub-upstream.mjs --stamp`, JSON answers).
   */
  send(b: string): Promise<{ first: bigint; last: bigint; received?: bigint }>
  close(): Promise<void>
}

/** `stamped`: read the stub's "received" from a JSON answer (the answer is then kept to parse it). */
export function h1Sender(url: string, stamped = false): Sender {
  const client = new Client(url, { connections: 64, pipelining: 1, keepAliveTimeout: 60_000 } as never)
  return {
    async send(b) {
      const res = await client.request({ path: '/v1/chat/completions', method: 'POST', body: b, headers: { 'content-type': 'application/json' } })
      let first = 0n
      let text = ''
      for await (const c of res.body) {
        if (first === 0n) first = process.hrtime.bigint()
        if (stamped) text += c
      }
      if (res.statusCode !== 200) throw new Error(`status ${res.statusCode}`)
      const last = process.hrtime.bigint()
      const received = stamped ? (JSON.parse(text) as { received?: string }).received : undefined
      return { first, last, ...(received !== undefined && { received: BigInt(received) }) }
    },
    close: () => client.close(),
  }
}

export interface Sample {
  ttfb: hdr.Histogram
  total: hdr.Histogram
  lag: hdr.Histogram // how late each send was against the schedule (timer resolution)
  /** From the send to when the stub had the whole request, and from then to the first byte back: only for answers that say when (Sender). */
  there: hdr.Histogram
  back: hdr.Histogram
  errors: number
}

export const sample = (): Sample => ({ ttfb: histogram(), total: histogram(), lag: histogram(), there: histogram(), back: histogram(), errors: 0 })

/** Open loop at `rate` req/s for `seconds`, into `into`: latency from the actual send. */
export async function openLoop(sender: Sender, stream: boolean, rate: number, seconds: number, into: Sample): Promise<void> {
  const { ttfb, total, lag, there, back } = into
  const n = Math.round(rate * seconds)
  const bodies = Array.from({ length: 64 }, (_, i) => chatBody(i, stream))
  const t0 = process.hrtime.bigint() + 10_000_000n
  const interval = BigInt(Math.round(1e9 / rate))
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
              if (r.received !== undefined) {
                there.recordValue(Math.max(1, Number(r.received - sent) / 1000))
                back.recordValue(Math.max(1, Number(r.first - r.received) / 1000))
              }
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

export interface Rotation {
  rate: number
  /** Seconds of one turn. */
  turn: number
  rounds: number
  /** Every other slot in the reverse order, so that a load that grows or fades through the run falls on every path alike. */
  alternate?: boolean
  /** Seconds of one slot (default SLOT_S): a turn is taken as slots, the paths in rotation slot by slot. */
  slot?: number
  /** Called before and after each measured slot of a path (not the discarded turn), with the requests it sends. */
  onSlot?(path: string, phase: 'start' | 'end', requests: number): void
}

/**
 * A turn is taken in slots this long, each path one slot in rotation: whatever else the shared
 * machine does over a few seconds then falls on every path alike. Taken as whole turns of two
 * seconds, two runs of one program (bench:ladder's floor and node-floor rows) differed by up to
 * 1.87× in added p50 on the 2-core development machine; in quarter-second slots, by 0.85-0.99×.
 */
export const SLOT_S = 0.25

/** The paths in the order they take slot `k`. */
const inOrder = <T>(paths: readonly T[], k: number, alternate: boolean | undefined): readonly T[] => (alternate && k % 2 === 1 ? [...paths].reverse() : paths)

/**
 * The same open-loop load through every path: a first turn per path, discarded (the JIT of
 * every process on the path, its connections), then `rounds` turns, each taken as slots in
 * rotation, so that the noise of a shared machine falls on all alike; `into` says where each
 * round of a path is recorded (it is asked once per slot, and should give the same sample).
 */
export async function rotate(paths: readonly [string, Sender][], stream: boolean, o: Rotation, into: (path: string, round: number) => Sample): Promise<void> {
  for (const [, sender] of paths) await openLoop(sender, stream, o.rate, o.turn, sample())
  const slots = Math.max(1, Math.round(o.turn / (o.slot ?? SLOT_S)))
  // What openLoop sends in one slot.
  const requests = Math.round((o.rate * o.turn) / slots)
  for (let r = 0; r < o.rounds; r++) {
    for (let k = 0; k < slots; k++) {
      for (const [name, sender] of inOrder(paths, r * slots + k, o.alternate)) {
        o.onSlot?.(name, 'start', requests)
        await openLoop(sender, stream, o.rate, o.turn / slots, into(name, r))
        o.onSlot?.(name, 'end', requests)
      }
    }
  }
}

/** Closed loop with `concurrency` outstanding requests until `count` are done, or for `seconds`. */
export async function closedLoop(sender: Sender, concurrency: number, stop: { count?: number; seconds?: number }): Promise<{ done: number; seconds: number }> {
  const b = chatBody(0, false)
  const t0 = performance.now()
  const end = stop.seconds !== undefined ? t0 + stop.seconds * 1000 : Infinity
  let issued = 0
  let done = 0
  await Promise.all(
    Array.from({ length: concurrency }, async () => {
      while (performance.now() < end && issued < (stop.count ?? Infinity)) {
        issued++
        await sender.send(b)
        done++
      }
    }),
  )
  return { done, seconds: (performance.now() - t0) / 1000 }
}

/**
 * CPU time per request (µs, user + system of the process and its descendants, from /proc) of
 * each proxy with a pid, over `requests` requests sent in `rounds` turns the proxies take in
 * rotation (closed loop, 64 outstanding, on senders already connected): on a shared machine a
 * burst of someone else's work then spoils one turn of one proxy rather than its whole figure.
 * Returns each proxy's turns; none where /proc is not there. `alternate` as in Rotation.
 */
export async function cpuTurns(proxies: readonly { name: string; pid?: number | undefined; sender: Sender }[], requests: number, rounds: number, alternate = false): Promise<Record<string, number[]>> {
  const turn = Math.ceil(requests / rounds)
  const turns: Record<string, number[]> = {}
  for (let round = 0; round < rounds; round++) {
    for (const p of inOrder(proxies, round, alternate)) {
      if (p.pid === undefined) continue
      const before = treeCpuMs(p.pid)
      await closedLoop(p.sender, 64, { count: turn })
      const after = treeCpuMs(p.pid)
      if (before !== undefined && after !== undefined) (turns[p.name] ??= []).push(((after - before) * 1000) / turn)
    }
  }
  return turns
}

/** The middle value (the upper one of an even count); undefined for none. */
export const median = (xs: readonly number[]): number | undefined => (xs.length === 0 ? undefined : [...xs].sort((a, b) => a - b)[Math.floor(xs.length / 2)])

export const us = (v: number) => (Math.abs(v) >= 1000 ? `${(v / 1000).toFixed(2)} ms` : `${v.toFixed(0)} µs`)
export const pad = (s: string, n: number) => s.padEnd(n)
/** a / b when b is a positive baseline; a ratio to nothing (or to a negative added latency) means nothing. */
export const ratio = (a: number | undefined, b: number | undefined) => (a === undefined || b === undefined || b <= 0 ? undefined : a / b)
export const times = (r: number | undefined) => (r === undefined ? 'n/a' : `${r.toFixed(2)}×`)
