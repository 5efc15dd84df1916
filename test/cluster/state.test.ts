// Where the shared routing state of `serve --workers` lives, as production meets it: in
// anonymous shared memory that the workers map, that a replaced worker maps again, that goes
// with the processes when the primary is killed, and that a small /dev/shm does not bound.
import { spawnSync } from 'node:child_process'
import { readdirSync, readFileSync, readlinkSync } from 'node:fs'
import { tmpdir } from 'node:os'
import { describe, expect, it } from 'vitest'
import { releaseHeld, until } from '../proxy/helpers.js'
import { type Answer, Client, clientsOnDistinctWorkers, holdingStub, metrics, metricSum, serve, untilMetric, clusterFixture } from './helpers.js'

const f = clusterFixture()

/** Whether the process runs (a zombie waiting for its parent's reaper does not). */
function alive(pid: number): boolean {
  try {
    return !/^State:\s+Z/m.test(readFileSync(`/proc/${pid}/status`, 'utf8'))
  } catch {
    return false
  }
}

/** Whether the process maps anonymous shared router state. */
function mapsState(pid: number): boolean {
  return readFileSync(`/proc/${pid}/maps`, 'utf8').includes('/memfd:prefix-router-state')
}

/** The primary's descriptors of anonymous router state. */
function states(pid: number): string[] {
  return readdirSync(`/proc/${pid}/fd`).filter((fd) => {
    try {
      return readlinkSync(`/proc/${pid}/fd/${fd}`).startsWith('/memfd:prefix-router-state')
    } catch {
      return false // closed since the listing
    }
  })
}

/** Bytes of router state the process has resident, file or memfd. */
function stateResident(pid: number): number {
  let bytes = 0
  let inState = false
  for (const line of readFileSync(`/proc/${pid}/smaps`, 'utf8').split('\n')) {
    if (/^[0-9a-f]+-[0-9a-f]+ /.test(line)) inState = line.includes('prefix-router-state')
    else if (inState && line.startsWith('Rss:')) bytes += Number(/(\d+) kB/.exec(line)![1]) * 1024
  }
  return bytes
}

/** State files in dir that process `pid` made. */
const filesOf = (dir: string, pid: number) => readdirSync(dir).filter((n) => n.startsWith(`prefix-router-state-${pid}-`))

const held = () => f.stubs.reduce((n, s) => n + s.held.length, 0)

// A private mount namespace with a 1 MiB /dev/shm: root may make one, others where user
// namespaces are allowed.
const unshare = ['unshare', process.getuid?.() === 0 ? '-m' : '-rm']
const smallShm = (argv: string[]) => [...unshare, 'sh', '-c', 'mount -t tmpfs -o size=1m tmpfs /dev/shm && exec "$@"', 'sh', ...argv]
const canShrinkShm = spawnSync(unshare[0]!, [...unshare.slice(1), 'sh', '-c', 'mount -t tmpfs -o size=1m tmpfs /dev/shm'], { stdio: 'ignore' }).status === 0

describe('serve --workers: the shared routing state', () => {
  it('a primary killed with SIGKILL leaves nothing behind: its workers exit, and no state file exists anywhere', async () => {
    f.stubs = await Promise.all(['a', 'b'].map((n) => holdingStub(n)))
    f.served = await serve(['--workers', '2', ...f.stubs.flatMap((s) => ['--upstream', s.url])])
    const primary = f.served.child.pid!
    const workers = await clientsOnDistinctWorkers(f.served.url, 2)
    f.clients.push(...workers.map((w) => w.client))
    expect(states(primary)).toHaveLength(1) // one endpoint, one state
    for (const w of workers) expect(mapsState(Number(w.pid))).toBe(true)
    for (const dir of ['/dev/shm', tmpdir()]) expect(filesOf(dir, primary)).toEqual([])

    f.served.child.kill('SIGKILL')
    await f.served.exited
    for (const w of workers) await until(() => !alive(Number(w.pid)), 50_000, `worker ${w.pid} to exit after its primary`)
    for (const dir of ['/dev/shm', tmpdir()]) expect(filesOf(dir, primary)).toEqual([])
  })

  it('a worker that replaces a dead one maps the same state: requests held through it and another count together', async () => {
    f.stubs = await Promise.all(['a', 'b', 'c'].map((n) => holdingStub(n)))
    f.served = await serve(['--workers', '2', '--strategy', 'prefix_aware', '--concurrency-threshold', '2', ...f.stubs.flatMap((s) => ['--upstream', s.url])])
    const [dead, survivor] = await clientsOnDistinctWorkers(f.served.url, 2)
    f.clients.push(dead!.client, survivor!.client)
    process.kill(Number(dead!.pid), 'SIGKILL')
    await untilMetric(f.served.admin, 'prefix_router_worker_restarts_total', 1)
    await untilMetric(f.served.admin, 'prefix_router_workers', 2)

    // One client on the survivor, one on its new peer.
    const pair = await clientsOnDistinctWorkers(f.served.url, 2)
    f.clients.push(...pair.map((p) => p.client))
    const pids = pair.map((p) => p.pid)
    expect(pids).toContain(survivor!.pid)
    expect(pids).not.toContain(dead!.pid)
    for (const p of pair) expect(mapsState(Number(p.pid))).toBe(true)

    for (const s of f.stubs) s.hold = true
    const prefix = 'One system prompt for every request of this test. '.repeat(30)
    const third = new Client(f.served.url)
    f.clients.push(third)
    const answers: Promise<Answer>[] = []
    for (const c of [...pair.map((p) => p.client), third]) {
      answers.push(c.chat(prefix))
      const n = answers.length
      await until(() => held() === n, 50_000, `${n} requests held upstream`)
    }
    releaseHeld(f.stubs)
    const got = await Promise.all(answers)
    expect(got.map((a) => a.status)).toEqual([200, 200, 200])
    expect(got.map((a) => a.headers['x-prefix-router-decision'])).toEqual(['target', 'target', 'overflow'])
    expect(got[1]!.headers['x-prefix-router-instance']).toBe(got[0]!.headers['x-prefix-router-instance'])
    await untilMetric(f.served.admin, 'prefix_router_in_flight', 0)
  })

  it.skipIf(!canShrinkShm)('a /dev/shm smaller than the state: longest_prefix fills an index four times its size, and no worker dies', async () => {
    f.stubs = await Promise.all(['a', 'b'].map((n) => holdingStub(n)))
    f.served = await serve(['--workers', '2', '--strategy', 'longest_prefix', ...f.stubs.flatMap((s) => ['--upstream', s.url])], smallShm)
    const workers = await clientsOnDistinctWorkers(f.served.url, 2)
    const clients = workers.map((c) => c.client)
    f.clients.push(...clients)
    // Distinct prompts of 16 KiB: 256 new blocks in the index each. Counted, not timed: the
    // index's pages are committed as it grows, and each worker maps what it touched.
    const committed = () => Math.max(...workers.map((w) => stateResident(Number(w.pid))))
    let sent = 0
    while (committed() < 4 << 20) {
      if (sent >= 4000) throw new Error(`the workers map only ${committed()} bytes of state after ${sent} requests`)
      const answers = await Promise.all(clients.map((c, i) => c.chat(`conversation ${sent + i} `.padEnd(16 << 10, `${sent + i} `))))
      expect(answers.map((a) => a.status)).toEqual(clients.map(() => 200))
      sent += clients.length
    }
    expect(metricSum(await metrics(f.served.admin), 'prefix_router_worker_restarts_total')).toBe(0)
    expect(f.served.child.exitCode).toBeNull()
  })
})
