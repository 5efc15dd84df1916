// One router state shared by processes: children attach to the parent's state file, and the
// picks of all of them see every lease as one process would. The children load the built
// package (dist/), like the worker-thread fixtures.
import { fork, type ChildProcess } from 'node:child_process'
import { closeSync, existsSync, ftruncateSync, mkdtempSync, openSync, readdirSync, readlinkSync, rmSync } from 'node:fs'
import { tmpdir } from 'node:os'
import { join } from 'node:path'
import v8 from 'node:v8'
import { runInNewContext } from 'node:vm'
import { afterEach, describe, expect, it } from 'vitest'
import { Router } from '../../src/core/router.js'
import { ids } from '../helpers/keys.js'

const childScript = new URL('../fixtures/shared-router-child.mjs', import.meta.url)
const creatorScript = new URL('../fixtures/shared-router-creator.mjs', import.meta.url)

/** The router state files in dir (made by process `pid`, if given), as full paths. */
function stateFiles(dir: string, pid?: number): string[] {
  return readdirSync(dir)
    .filter((f) => f.startsWith(`prefix-router-state-${pid === undefined ? '' : `${pid}-`}`))
    .map((f) => join(dir, f))
    .sort()
}

/** A process that creates a shared router ('anonymous', or in a directory) and waits to be killed. */
async function creator(where: string): Promise<{ proc: ChildProcess; path: string }> {
  const proc = fork(creatorScript, [where], { stdio: ['ignore', 'inherit', 'inherit', 'ipc'] })
  const path = await new Promise<string>((res, rej) => {
    proc.once('message', (m) => res((m as { path: string }).path))
    proc.once('exit', (code) => rej(new Error(`creator exited (${code}) before reporting its state`)))
  })
  return { proc, path }
}

async function kill(proc: ChildProcess): Promise<void> {
  const exited = new Promise((res) => proc.once('exit', res))
  proc.kill('SIGKILL')
  await exited
}

interface Got { instance: string; overflow: boolean }

class Child {
  readonly proc: ChildProcess
  readonly #queue: unknown[] = []
  readonly #waiting: ((m: unknown) => void)[] = []

  constructor(path: string) {
    this.proc = fork(childScript, [path], { stdio: ['ignore', 'inherit', 'inherit', 'ipc'] })
    this.proc.on('message', (m) => {
      const w = this.#waiting.shift()
      if (w) w(m)
      else this.#queue.push(m)
    })
  }

  next<T>(): Promise<T> {
    if (this.#queue.length > 0) return Promise.resolve(this.#queue.shift() as T)
    return new Promise((res, rej) => {
      this.#waiting.push((m) => res(m as T))
      this.proc.once('exit', (code) => rej(new Error(`child exited (${code}) before replying`)))
    })
  }

  async ask<T>(msg: object): Promise<T> {
    this.proc.send(msg)
    return this.next<T>()
  }

  async pick(prefixes: string[], hold: boolean, opts?: object): Promise<Got[]> {
    return (await this.ask<{ got: Got[] }>({ cmd: 'pick', prefixes, hold, opts })).got
  }

  async stop(): Promise<void> {
    if (this.proc.exitCode !== null || this.proc.signalCode !== null) return
    const exited = new Promise((res) => this.proc.once('exit', res))
    this.proc.kill()
    await exited
  }
}

const children: Child[] = []
const routers: Router[] = []

async function spawn(path: string): Promise<Child> {
  const c = new Child(path)
  children.push(c)
  await c.next()  // ready
  return c
}

function shared(options: ConstructorParameters<typeof Router>[0]): Router {
  const r = new Router({ ...options, shared: true })
  routers.push(r)
  return r
}

afterEach(async () => {
  await Promise.all(children.splice(0).map((c) => c.stop()))
  for (const r of routers.splice(0)) r.close()
})

describe('Router shared between processes', () => {
  it('keeps the state in anonymous shared memory, named by /proc/<pid>/fd, with no file in /dev/shm', () => {
    const r = new Router({ instances: [{ id: 'a' }], shared: true })
    const path = r.sharedPath!
    expect(path).toMatch(new RegExp(`^/proc/${process.pid}/fd/\\d+$`))
    expect(readlinkSync(path)).toMatch(/^\/memfd:prefix-router-state/)
    expect(stateFiles('/dev/shm', process.pid)).toEqual([])
    // Sealed at its size: a process that opens it cannot shrink it under the others' mappings.
    const fd = openSync(path, 'r+')
    try {
      expect(() => ftruncateSync(fd, 4096)).toThrow(expect.objectContaining({ code: 'EPERM' }))
    } finally {
      closeSync(fd)
    }
    r.close()
    expect(existsSync(path)).toBe(false)
    const local = new Router({ instances: [{ id: 'a' }] })
    expect(local.sharedPath).toBeUndefined()
    local.close()
  })

  it('a creator killed with SIGKILL leaves nothing behind; attaching to it then fails naming the path', async () => {
    const { proc, path } = await creator('anonymous')
    expect(readlinkSync(path)).toMatch(/^\/memfd:prefix-router-state/)
    await kill(proc)
    expect(stateFiles('/dev/shm', proc.pid)).toEqual([])
    expect(stateFiles(tmpdir(), proc.pid)).toEqual([])
    expect(() => Router.attach(path)).toThrow(
      expect.objectContaining({ code: 'ROUTER_SHARED_STATE', message: expect.stringContaining(`'${path}'`) }),
    )
  })

  it('shared: { directory } keeps a file there, removed on close; a crashed creator\'s file goes with the next creation', async () => {
    const dir = mkdtempSync(join(tmpdir(), 'prefix-router-test-'))
    try {
      const { proc, path: crashed } = await creator(dir)
      expect(crashed.startsWith(join(dir, `prefix-router-state-${proc.pid}-`))).toBe(true)
      await kill(proc)
      expect(stateFiles(dir)).toEqual([crashed]) // nobody left to remove it
      const r = new Router({ instances: [{ id: 'a' }], shared: { directory: dir } })
      routers.push(r)
      expect(stateFiles(dir)).toEqual([r.sharedPath!])
      const c = await spawn(r.sharedPath!)
      expect(await c.pick(['x'], true)).toEqual([{ instance: 'a', overflow: false }])
      expect(r.inFlight('a')).toBe(1)
      await c.ask({ cmd: 'release' })
      r.close()
      expect(stateFiles(dir)).toEqual([])
    } finally {
      rmSync(dir, { recursive: true, force: true })
    }
  })

  it('a directory that cannot hold the state is refused, naming it', () => {
    expect(() => new Router({ instances: [{ id: 'a' }], shared: { directory: '/nonexistent/dir' } })).toThrow(
      expect.objectContaining({ name: 'SharedRouterError', code: 'ROUTER_SHARED_STATE', message: expect.stringContaining("'/nonexistent/dir'") }),
    )
    for (const bad of [{ directory: '' }, { dir: '/tmp' }, 'yes', null]) {
      expect(() => new Router({ instances: [{ id: 'a' }], shared: bad as unknown as boolean })).toThrow(expect.objectContaining({ code: 'ERR_INVALID_ARG_TYPE' }))
    }
  })

  it('refuses a path that is not a router state, with a coded error naming it', () => {
    expect(() => Router.attach('/nonexistent/state')).toThrow(
      expect.objectContaining({ name: 'SharedRouterError', code: 'ROUTER_SHARED_STATE', message: expect.stringContaining('/nonexistent/state') }),
    )
    expect(() => Router.attach(new URL(import.meta.url).pathname)).toThrow(expect.objectContaining({ code: 'ROUTER_SHARED_STATE' }))
    expect(() => Router.attach('')).toThrow(expect.objectContaining({ code: 'ERR_INVALID_ARG_TYPE' }))
  })

  it('leases held by two children fill the target to the threshold; the next pick overflows as in one process', async () => {
    const threshold = 3
    const instances = ids(5).map((id) => ({ id }))
    const r = shared({ instances, concurrencyThreshold: threshold })
    // The same fleet in one process, as the reference.
    const local = new Router({ instances, concurrencyThreshold: threshold })
    routers.push(local)
    const probe = local.pick('shared prefix')
    const target = probe.instance
    probe.release()

    const [a, b] = await Promise.all([spawn(r.sharedPath!), spawn(r.sharedPath!)])
    const heldA = await a.pick(['shared prefix', 'shared prefix'], true)
    const heldB = await b.pick(['shared prefix'], true)
    expect([...heldA, ...heldB]).toEqual(Array(threshold).fill({ instance: target, overflow: false }))
    expect(r.inFlight(target)).toBe(threshold)

    const refLeases = Array.from({ length: threshold }, () => local.pick('shared prefix'))
    const ref = local.pick('shared prefix')
    const next = r.pick('shared prefix')
    expect(ref.overflow).toBe(true)
    expect({ instance: next.instance, overflow: next.overflow }).toEqual({ instance: ref.instance, overflow: true })
    // A child's pick sees the parent's lease too.
    const fromChild = await a.pick(['shared prefix'], false)
    expect(fromChild).toEqual([{ instance: ref.instance, overflow: true }])

    next.release()
    ref.release()
    refLeases.forEach((l) => l.release())
    await a.ask({ cmd: 'release' })
    await b.ask({ cmd: 'release' })
    expect(r.inFlight(target)).toBe(0)
    expect(r.instances().every((i) => i.inFlight === 0)).toBe(true)
  })

  it('least_outstanding_requests counts the leases of every process', async () => {
    const instances = ids(4).map((id) => ({ id }))
    const r = shared({ instances, strategy: 'least_outstanding_requests' })
    const c = await spawn(r.sharedPath!)
    // Four leases held in the child spread over the four instances; a fifth to any of them.
    const got = await c.pick(['1', '2', '3', '4'], true)
    expect(new Set(got.map((g) => g.instance)).size).toBe(4)
    expect(r.instances().map((i) => i.inFlight)).toEqual([1, 1, 1, 1])
    await c.ask({ cmd: 'release' })
    expect(r.instances().map((i) => i.inFlight)).toEqual([0, 0, 0, 0])
  })

  it('a child killed holding leases: releaseProcess(pid) brings every counter back to 0', async () => {
    const instances = ids(3).map((id) => ({ id }))
    const r = shared({ instances, concurrencyThreshold: 100 })
    const c = await spawn(r.sharedPath!)
    const got = await c.pick(['p1', 'p2', 'p3', 'p4', 'p5', 'p1'], true)
    expect(got).toHaveLength(6)
    expect(r.instances().reduce((n, i) => n + i.inFlight, 0)).toBe(6)
    const pid = c.proc.pid!
    const exited = new Promise((res) => c.proc.once('exit', res))
    c.proc.kill('SIGKILL')
    await exited
    expect(r.instances().reduce((n, i) => n + i.inFlight, 0)).toBe(6) // nobody released them
    expect(r.releaseProcess(pid)).toBe(6)
    expect(r.instances().map((i) => i.inFlight)).toEqual([0, 0, 0])
    expect(r.releaseProcess(pid)).toBe(0) // its row is gone: nothing twice
    expect(() => r.releaseProcess(0)).toThrow(expect.objectContaining({ code: 'ERR_OUT_OF_RANGE' }))
  })

  it("a child's close() ends the leases it still holds", async () => {
    const r = shared({ instances: [{ id: 'a' }, { id: 'b' }], concurrencyThreshold: 100 })
    const c = await spawn(r.sharedPath!)
    await c.pick(['1', '2', '3'], true)
    expect(r.inFlight('a') + r.inFlight('b')).toBe(3)
    await c.ask({ cmd: 'close' })
    expect(r.inFlight('a') + r.inFlight('b')).toBe(0)
    expect(r.releaseProcess(c.proc.pid!)).toBe(0)
  })

  it('an attached router follows the creator: membership and configure(); and cannot change them itself', async () => {
    const r = shared({ instances: [{ id: 'a' }, { id: 'b' }], concurrencyThreshold: 7 })
    const c = await spawn(r.sharedPath!)
    let seen = await c.ask<{ params: { concurrencyThreshold: number; strategy: string }; instances: { id: string }[] }>({ cmd: 'inspect' })
    expect(seen.params.concurrencyThreshold).toBe(7)
    expect(seen.instances.map((i) => i.id)).toEqual(['a', 'b'])

    r.configure({ concurrencyThreshold: 2, strategy: 'least_outstanding_requests' })
    r.setInstances([{ id: 'b' }, { id: 'c' }, { id: 'd' }])
    seen = await c.ask({ cmd: 'inspect' })
    expect(seen.params).toMatchObject({ concurrencyThreshold: 2, strategy: 'least_outstanding_requests' })
    expect(seen.instances.map((i) => i.id)).toEqual(['b', 'c', 'd'])
    const got = await c.pick(['x', 'y', 'z'], true)
    expect(new Set(got.map((g) => g.instance))).toEqual(new Set(['b', 'c', 'd']))

    expect(await c.ask({ cmd: 'write' })).toEqual({ error: { code: 'ROUTER_READ_ONLY', name: 'SharedRouterError' } })
    await c.ask({ cmd: 'release' })
    expect(r.instances().map((i) => i.inFlight)).toEqual([0, 0, 0])
  })

  it('longest_prefix: a prompt routed by one process is matched by another', async () => {
    const instances = ids(8).map((id) => ({ id }))
    const r = shared({ instances, strategy: 'longest_prefix' })
    const [a, b] = await Promise.all([spawn(r.sharedPath!), spawn(r.sharedPath!)])
    // Prompts shorter than prefixLength hash whole, so a longer turn of the same conversation
    // has another key: only the index can send it where its opening went.
    const text = (i: number, n: number) => Array.from({ length: n }, (_, k) => `turn ${i} line ${k} `.padEnd(32, '.')).join('')
    const first = Array.from({ length: 12 }, (_, i) => text(i, 20))
    const later = first.map((p, i) => p + text(i + 100, 20))
    const placed = await a.pick(first, false)
    expect(r.stats().indexEntries).toBeGreaterThan(0) // the child's inserts are in the shared index
    const matched = await b.pick(later, false)
    expect(matched.map((m) => m.instance)).toEqual(placed.map((p) => p.instance))

    // Without a shared index (two processes' own routers), the later turns go by their hash.
    const own1 = new Router({ instances, strategy: 'longest_prefix' })
    const own2 = new Router({ instances, strategy: 'longest_prefix' })
    routers.push(own1, own2)
    const apart = first.map((p, i) => {
      own1.pick(p).release()
      const l = own2.pick(later[i]!)
      l.release()
      return l.instance
    })
    expect(apart.filter((inst, i) => inst === placed[i]!.instance).length).toBeLessThan(first.length)
  })

  it('a lease dropped without release() is ended by the garbage collector and counted', async () => {
    // A full collection on demand: allocation alone runs scavenges, which leave leases that
    // were promoted to the old generation in place.
    v8.setFlagsFromString('--expose-gc')
    const gc = runInNewContext('gc') as () => void
    const r = new Router({ instances: [{ id: 'a' }] })
    routers.push(r)
    // Leases released and then dropped are collected as well, and must end nothing again: the
    // one still held keeps its count.
    const held = r.pick('held')
    ;(() => {
      for (let i = 0; i < 5; i++) r.pick('dropped')
      for (let i = 0; i < 20; i++) r.pick('released').release()
    })()
    expect(r.inFlight('a')).toBe(6)
    // Finalization callbacks run as tasks after the collection: wait for the count.
    while (r.stats().leasesCollected < 5) {
      gc()
      await new Promise((res) => setTimeout(res, 10))
    }
    // More rounds, so that the released leases' callbacks have surely run too.
    for (let i = 0; i < 5; i++) {
      gc()
      await new Promise((res) => setTimeout(res, 10))
    }
    expect(r.stats().leasesCollected).toBe(5)
    expect(r.inFlight('a')).toBe(1)
    held.release()
    expect(r.inFlight('a')).toBe(0)
  })
})
