// One router state shared by worker threads: picks and releases from several threads while
// the main thread swaps membership; every counter ends at 0 and nothing crashes.
import { Worker } from 'node:worker_threads'
import { describe, expect, it } from 'vitest'
import { Router } from '../../src/core/router.js'
import { ids } from '../helpers/keys.js'

const workerUrl = new URL('../fixtures/router-thread.mjs', import.meta.url)

describe('router shared across worker_threads', () => {
  it('workers open it by name and share counters and membership', async () => {
    const r = new Router({ name: 'threads-share', instances: [{ id: 'only' }] })
    const w = new Worker(new URL('../fixtures/router-thread-hold.mjs', import.meta.url), {
      workerData: { name: 'threads-share' },
    })
    const instance = await new Promise<string>((res, rej) => {
      w.once('message', res)
      w.once('error', rej)
    })
    expect(instance).toBe('only')
    expect(r.inFlight('only')).toBe(1) // the worker's lease is visible here
    w.postMessage('release')
    await new Promise((res) => w.once('message', res))
    expect(r.inFlight('only')).toBe(0)
    await w.terminate()
    r.close()
  })

  it('stress: 3 threads pick/release while the main thread swaps membership', async () => {
    const pool = ids(10).map((id) => ({ id }))
    const r = new Router({ name: 'threads-stress', instances: pool.slice(0, 7), concurrencyThreshold: 4 })
    const workers = [0, 1, 2].map(() => new Worker(workerUrl, { workerData: { name: 'threads-stress' } }))
    const errors: Error[] = []
    workers.forEach((w) => w.on('error', (e) => errors.push(e)))
    // Swap membership until 200 swaps are done and every worker has picked through at least
    // three bursts meanwhile: counts, not time, so a busy machine only makes it slower.
    const bursts = [0, 0, 0]
    const results = workers.map(
      (w, i) =>
        new Promise<{ picks: number }>((res) =>
          w.on('message', (m: { progress?: number; picks?: number }) => {
            if (m.progress !== undefined) bursts[i]!++
            else res(m as { picks: number })
          }),
        ),
    )
    const start = [...bursts]
    let swaps = 0
    while (swaps < 200 || bursts.some((b, i) => b - start[i]! < 3)) {
      const n = 3 + (swaps % 8)
      r.setInstances(pool.filter((_, i) => (i + swaps) % 10 < n))
      swaps++
      await new Promise((res) => setImmediate(res))
    }
    workers.forEach((w) => w.postMessage('stop'))
    const done = await Promise.all(results)
    await Promise.all(workers.map((w) => w.terminate()))

    expect(errors).toEqual([])
    expect(done.every((d) => d.picks >= 3 * 2000)).toBe(true)
    r.setInstances(pool)
    expect(r.instances().map((i) => i.inFlight)).toEqual(Array(10).fill(0))
    expect(r.stats().slotsInUse).toBe(10) // every draining slot was freed
    r.close()
  })

  it('refuses a 129th open handle on one router with ROUTER_TOO_MANY_HANDLES, and frees handles on close', () => {
    const first = new Router({ name: 'threads-many', instances: [{ id: 'a' }] })
    const more = Array.from({ length: 127 }, () => Router.open('threads-many'))
    expect(() => Router.open('threads-many')).toThrow(expect.objectContaining({ code: 'ROUTER_TOO_MANY_HANDLES' }))
    more.pop()!.close()
    const again = Router.open('threads-many')
    again.close()
    more.forEach((r) => r.close())
    first.close()
  })

  it('a name can only be created once while open, and is free again after close', () => {
    const a = new Router({ name: 'threads-once', instances: [{ id: 'a' }] })
    expect(() => new Router({ name: 'threads-once', instances: [{ id: 'a' }] })).toThrow(
      expect.objectContaining({ code: 'ROUTER_EXISTS' }),
    )
    a.close()
    const b = new Router({ name: 'threads-once', instances: [{ id: 'a' }] })
    b.close()
    expect(() => Router.open('threads-once')).toThrow(expect.objectContaining({ code: 'ROUTER_NOT_FOUND' }))
  })
})
