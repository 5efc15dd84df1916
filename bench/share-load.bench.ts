// What sharing queued prefill through Redis costs each replica: 4 replica processes, each a
// Router over 16 instances whose queued prefill changes faster than the interval (a lease
// taken every 5 ms, the oldest released), so that every 10 ms interval publishes, and each
// hears the other three. CPU is measured per process with process.cpuUsage over a window after
// a discarded warm-up, twice: with the lease driver alone (the baseline), then with the
// sharing on too; the difference is the sharing's cost, as % of one core. Redis's own CPU over
// the second window comes from INFO cpu.
// Run: npm run bench:share-load   (REPLICAS=4 INSTANCES=16 INTERVAL_MS=10 WINDOW_S=10 WARMUP_S=3;
//   PROFILE_CHILD=k writes a CPU profile of replica k to bench/results/prof)
import { fork, type ChildProcess } from 'node:child_process'
import { fileURLToPath } from 'node:url'
import type { Lease } from '../src/core/router.js'
import { machine } from './harness.js'
import { redisCommand, startRedisServer } from './redis.js'

const REPLICAS = Number(process.env.REPLICAS ?? 4)
const INSTANCES = Number(process.env.INSTANCES ?? 16)
const INTERVAL_MS = Number(process.env.INTERVAL_MS ?? 10)
const WINDOW_S = Number(process.env.WINDOW_S ?? 10)
const WARMUP_S = Number(process.env.WARMUP_S ?? 3)
const self = fileURLToPath(import.meta.url)

type ToChild = { cmd: 'measure'; ms: number } | { cmd: 'share'; url: string } | { cmd: 'peers' } | { cmd: 'exit' }
type FromChild =
  | { ready: true }
  | { cpuUs: number; userUs: number; wallMs: number; sent: number; received: number }
  | { peers: number }

const sleep = (ms: number) => new Promise((r) => setTimeout(r, ms))

async function child(k: number): Promise<void> {
  const { Router } = await import('../src/core/router.js')
  const { ShareLoad } = await import('../src/fleet/share/share-load.js')
  // The same fleet behind every replica.
  const ids = Array.from({ length: INSTANCES }, (_, i) => `http://10.0.0.${i + 1}:8000`)
  const router = new Router({ strategy: 'longest_prefix', prefixLength: 65536, instances: ids.map((id) => ({ id })) })
  // The load: a lease every 5 ms on a prompt of its own, the oldest of 32 released.
  const held: Lease[] = []
  let n = 0
  setInterval(() => {
    held.push(router.pick(`replica ${k} prompt ${n++}: ${'text of its own '.repeat(64)}`))
    if (held.length > 32) held.shift()!.release()
  }, 5)
  let share: Awaited<ReturnType<typeof ShareLoad.start>> | undefined
  const send = (m: FromChild) => process.send!(m)
  process.on('message', (m: ToChild) => {
    void (async () => {
      if (m.cmd === 'share') {
        share = await ShareLoad.start({ url: m.url, replicaId: `bench-${k}`, intervalMs: INTERVAL_MS, endpoints: () => [{ name: 'default', router }] })
      } else if (m.cmd === 'peers') send({ peers: share?.peerCount() ?? 0 })
      else if (m.cmd === 'measure') {
        const c0 = process.cpuUsage()
        const t0 = performance.now()
        const s0 = share?.counts.sent ?? 0
        const r0 = share?.counts.received ?? 0
        await sleep(m.ms)
        const c = process.cpuUsage(c0)
        send({ cpuUs: c.user + c.system, userUs: c.user, wallMs: performance.now() - t0, sent: (share?.counts.sent ?? 0) - s0, received: (share?.counts.received ?? 0) - r0 })
      } else if (m.cmd === 'exit') {
        await share?.close()
        process.exit(0)
      }
    })()
  })
  send({ ready: true })
}

async function redisCpuS(port: number): Promise<number> {
  const info = await redisCommand(port, 'INFO cpu')
  const f = (k: string) => Number(new RegExp(`${k}:([\\d.]+)`).exec(info)?.[1] ?? NaN)
  return f('used_cpu_sys') + f('used_cpu_user')
}

async function main(): Promise<void> {
  console.log(`machine: ${machine()}`)
  console.log(`${REPLICAS} replicas x ${INSTANCES} instances, interval ${INTERVAL_MS} ms, windows of ${WINDOW_S} s after ${WARMUP_S} s of warm-up`)
  const redis = await startRedisServer()
  const { port } = redis
  const kids: ChildProcess[] = []
  const inbox = new Map<ChildProcess, FromChild[]>()
  const next = async <T extends FromChild>(c: ChildProcess, pred: (m: FromChild) => m is T): Promise<T> => {
    for (;;) {
      const q = inbox.get(c)!
      const i = q.findIndex(pred)
      if (i >= 0) return q.splice(i, 1)[0] as T
      await sleep(10)
    }
  }
  for (let k = 0; k < REPLICAS; k++) {
    const c = fork(self, ['--replica', String(k)], { execArgv: ['--import', 'tsx', ...(process.env.PROFILE_CHILD === String(k) ? ['--cpu-prof', '--cpu-prof-dir=bench/results/prof'] : [])], stdio: 'inherit' })
    inbox.set(c, [])
    c.on('message', (m: FromChild) => inbox.get(c)!.push(m))
    kids.push(c)
  }
  await Promise.all(kids.map((c) => next(c, (m): m is { ready: true } => 'ready' in m)))
  const isCpu = (m: FromChild): m is Extract<FromChild, { cpuUs: number }> => 'cpuUs' in m
  const measure = async () => {
    await sleep(WARMUP_S * 1000)
    for (const c of kids) c.send({ cmd: 'measure', ms: WINDOW_S * 1000 } satisfies ToChild)
    return Promise.all(kids.map((c) => next(c, isCpu)))
  }
  const base = await measure()
  for (const c of kids) c.send({ cmd: 'share', url: redis.url } satisfies ToChild)
  for (;;) {
    for (const c of kids) c.send({ cmd: 'peers' } satisfies ToChild)
    const p = await Promise.all(kids.map((c) => next(c, (m): m is { peers: number } => 'peers' in m)))
    if (p.every((x) => x.peers === REPLICAS - 1)) break
    await sleep(100)
  }
  const r0 = await redisCpuS(port)
  const shared = await measure()
  const r1 = await redisCpuS(port)
  const pct = (m: { cpuUs: number; wallMs: number }) => (m.cpuUs / 1000 / m.wallMs) * 100
  console.log('replica   baseline (leases only)   with sharing   sharing costs (user + system)   sent/s   received/s')
  const costs: number[] = []
  const users: number[] = []
  shared.forEach((s, k) => {
    const b = base[k]!
    const cost = pct(s) - pct(b)
    const user = ((s.userUs - b.userUs * (s.wallMs / b.wallMs)) / 1000 / s.wallMs) * 100
    costs.push(cost)
    users.push(user)
    console.log(
      `${String(k).padEnd(9)} ${`${pct(b).toFixed(2)}%`.padEnd(24)} ${`${pct(s).toFixed(2)}%`.padEnd(14)} ${`${cost.toFixed(2)}% (${user.toFixed(2)} + ${(cost - user).toFixed(2)})`.padEnd(31)} ${(s.sent / (s.wallMs / 1000)).toFixed(0).padEnd(8)} ${(s.received / (s.wallMs / 1000)).toFixed(0)}`,
    )
  })
  const mean = costs.reduce((a, b) => a + b, 0) / costs.length
  const meanUser = users.reduce((a, b) => a + b, 0) / users.length
  console.log(`sharing, mean per replica: ${mean.toFixed(2)}% of one core (${meanUser.toFixed(2)}% in user space, ${(mean - meanUser).toFixed(2)}% in the kernel: the sockets)`)
  console.log(`redis-server over the sharing window: ${(((r1 - r0) / WINDOW_S) * 100).toFixed(2)}% of one core (INFO cpu, used_cpu_sys + used_cpu_user)`)
  for (const c of kids) c.send({ cmd: 'exit' } satisfies ToChild)
  await Promise.all(kids.map((c) => new Promise((r) => (c.exitCode !== null ? r(undefined) : c.once('exit', r)))))
  redis.stop()
}

const at = process.argv.indexOf('--replica')
if (at >= 0) await child(Number(process.argv[at + 1]))
else await main()
