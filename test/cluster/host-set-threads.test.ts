// `--workers`: the host set a worker picks from follows the changes the primary publishes in
// the shared region, in real worker threads attached to the primary's shared router (as a
// worker process attaches it): a worker that follows reads the changes, one that missed more
// than the log keeps or starts late takes the snapshot, and each ends with the primary's set:
// health flips, removals and additions alike.
import { Worker } from 'node:worker_threads'
import { afterEach, describe, expect, it } from 'vitest'
import { parseConfig } from '../../src/config/config.js'
import { RequestError } from '../../src/core/errors.js'
import { Router } from '../../src/core/router.js'
import { HostLogWriter, LOG_KEEP, type HostState } from '../../src/cluster/host-log.js'
import { hostState, publishHosts } from '../../src/cluster/membership.js'
import { LocalEndpoint } from '../../src/fleet/local-endpoint.js'

const workerUrl = new URL('../fixtures/host-set-worker.mjs', import.meta.url)
const A = 'http://127.0.0.1:9'
const B = 'http://127.0.0.2:9'
const C = 'http://127.0.0.3:9'
const D = 'http://127.0.0.4:9'
const keys = Array.from({ length: 64 }, (_, i) => `prompt ${i}`)

const raw = (urls: string[]) => ({
  listen: { host: '127.0.0.1', port: 0 },
  health: { intervalMs: 0 },
  discovery: { modelsIntervalMs: 0, metricsIntervalMs: 0 },
  endpoints: [{ name: 'default', instances: urls.map((url) => ({ url, models: ['m'] })) }],
})

interface Report {
  recorded: HostState[]
  instances: { id: string; inRotation: boolean }[]
  last: 'log' | 'snapshot' | undefined
  seq: number | undefined
  picks: string[]
}

class Thread {
  readonly #w: Worker
  readonly #replies: ((m: unknown) => void)[] = []
  readonly first: Promise<Report>
  constructor(path: string) {
    this.#w = new Worker(workerUrl, { workerData: { path, config: raw([A]), keys } })
    this.#w.on('message', (m) => this.#replies.shift()?.(m))
    this.first = this.#next() as Promise<Report>
    this.#w.on('error', (err) => {
      throw err
    })
  }
  #next(): Promise<unknown> {
    return new Promise((r) => this.#replies.push(r))
  }
  read(): Promise<Report> {
    const r = this.#next() as Promise<Report>
    this.#w.postMessage('read')
    return r
  }
  async close(): Promise<void> {
    const r = this.#next()
    this.#w.postMessage('close')
    await r
    await this.#w.terminate()
  }
}

const threads: Thread[] = []
let primary: LocalEndpoint | undefined
afterEach(async () => {
  for (const t of threads.splice(0)) await t.close()
  await primary?.close()
  primary = undefined
})

function start(urls: string[]): { ep: LocalEndpoint; writer: HostLogWriter } {
  const c = parseConfig(raw(urls))
  const writer = new HostLogWriter()
  // As ClusterPrimary does: the changes published as the endpoint syncs, before its ring.
  const ep = new LocalEndpoint(c, c.endpoints[0]!, { router: (_name, options) => new Router({ ...options, shared: true }), onSync: (v) => publishHosts(v, writer) })
  ep.sync()
  primary = ep
  return { ep, writer }
}

function thread(ep: LocalEndpoint): Thread {
  const t = new Thread(ep.router.sharedPath!)
  threads.push(t)
  return t
}

/** What a worker's report must say to match the primary now. */
function expected(ep: LocalEndpoint, writer: HostLogWriter): Omit<Report, 'last' | 'picks'> {
  const all = [...ep.instances.values()].sort((a, b) => a.id.localeCompare(b.id))
  // As the record carries them: JSON, where an unset field is absent.
  return { recorded: JSON.parse(JSON.stringify(all.map(hostState))) as HostState[], instances: all.map((i) => ({ id: i.id, inRotation: i.inRotation })), seq: writer.head }
}

function primaryPicks(ep: LocalEndpoint): string[] {
  return keys.map((k) => {
    try {
      const { lease, instance } = ep.pick(k, undefined, 'm')
      lease.release()
      return instance.id
    } catch (err) {
      if (err instanceof RequestError) return `${err.status} ${err.code}`
      throw err
    }
  })
}

const up = { healthyThreshold: 1, unhealthyThreshold: 1 }

describe('--workers: host-set changes, read by worker threads', () => {
  it('a worker that follows reads each change from the log: a health flip, its return, a removal, an addition', async () => {
    const { ep, writer } = start([A, B, C])
    const w = thread(ep)
    const first = await w.first
    expect(first).toMatchObject({ ...expected(ep, writer), last: 'snapshot' })
    expect(first.picks).toEqual(primaryPicks(ep))

    ep.markDown(ep.instances.get(B)!, 'connection refused')
    const down = await w.read()
    expect(down).toMatchObject({ ...expected(ep, writer), last: 'log' })
    expect(down.instances.find((i) => i.id === B)).toEqual({ id: B, inRotation: false })
    expect(down.picks.filter((id) => id === B)).toEqual([])

    ep.instances.get(B)!.health.probe(true, undefined, up)
    ep.sync()
    const back = await w.read()
    expect(back).toMatchObject({ ...expected(ep, writer), last: 'log' })
    expect(back.picks).toContain(B)

    const without = parseConfig(raw([A, C]))
    ep.update(without, without.endpoints[0]!)
    const removed = await w.read()
    expect(removed).toMatchObject({ ...expected(ep, writer), last: 'log' })
    expect(removed.recorded.map((s) => s.id)).toEqual([A, C])
    expect(removed.picks.filter((id) => id !== A && id !== C)).toEqual([])

    const more = parseConfig(raw([A, C, D]))
    ep.update(more, more.endpoints[0]!)
    const added = await w.read()
    expect(added).toMatchObject({ ...expected(ep, writer), last: 'log' })
    expect(added.picks).toEqual(primaryPicks(ep))
  })

  it('a worker that missed more changes than the log keeps takes the snapshot; one a few behind still reads the log; one that starts late takes the snapshot', async () => {
    const { ep, writer } = start([A, B, C])
    const behind = thread(ep)
    const near = thread(ep)
    await behind.first
    await near.first
    const c = ep.instances.get(C)!
    for (let i = 0; i < 2 * LOG_KEEP; i++) {
      if (i % 2 === 0) ep.markDown(c, 'connection refused')
      else {
        c.health.probe(true, undefined, up)
        ep.sync()
      }
      if (i % 4 === 3) expect((await near.read()).last).toBe('log')
    }
    ep.markDown(ep.instances.get(A)!, 'connection refused')
    const removal = parseConfig(raw([A, C]))
    ep.update(removal, removal.endpoints[0]!)
    expect(await near.read()).toMatchObject({ ...expected(ep, writer), last: 'log' })
    const caughtUp = await behind.read()
    expect(caughtUp).toMatchObject({ ...expected(ep, writer), last: 'snapshot' })
    expect(caughtUp.recorded.map((s) => s.id)).toEqual([A, C])
    expect(caughtUp.picks).toEqual(primaryPicks(ep))
    expect(caughtUp.picks.filter((id) => id !== C)).toEqual([])

    const late = thread(ep)
    const joined = await late.first
    expect(joined).toMatchObject({ ...expected(ep, writer), last: 'snapshot' })
    expect(joined.picks).toEqual(primaryPicks(ep))
  })

  it('a torn record (a primary that died writing it) leaves the worker with the set it had, until a whole one comes', async () => {
    const { ep, writer } = start([A, B, C])
    const w = thread(ep)
    const before = await w.first
    const whole = writer.publish([...ep.instances.values()].map((i) => ({ ...hostState(i), healthy: false })))!
    const old = JSON.stringify({ whatever: 'the bytes were before' }).padEnd(whole.length, ' ')
    // The new record's first part over what the slot held: as the write stopped half-way.
    ep.router.fleetRecord.publish(whole.slice(0, whole.length >> 1) + old.slice(whole.length >> 1))
    const torn = await w.read()
    expect(torn).toMatchObject({ recorded: before.recorded, instances: before.instances, seq: before.seq })
    expect(torn.picks).toEqual(before.picks)
    ep.markDown(ep.instances.get(B)!, 'connection refused')
    const after = await w.read()
    expect(after).toMatchObject({ ...expected(ep, writer), last: 'log' })
  })
})
