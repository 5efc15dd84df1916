// The point of sharing one routing state: with --workers 2, requests for one prefix held
// open through different workers count against the same instance, and the next one
// overflows exactly as it does with one process.
import { describe, expect, it } from 'vitest'
import { releaseHeld, until } from '../proxy/helpers.js'
import { type Answer, Client, clientsOnDistinctWorkers, holdingStub, serve, stop, untilMetric, clusterFixture } from './helpers.js'

const f = clusterFixture()

const held = () => f.stubs.reduce((n, s) => n + s.held.length, 0)

/** Two requests with one prefix held open, then a third: what each was told about its routing. */
async function sequence(workers: number) {
  f.stubs = await Promise.all(['a', 'b', 'c'].map((n) => holdingStub(n)))
  for (const s of f.stubs) s.hold = true
  f.served = await serve(['--workers', String(workers), '--strategy', 'prefix_aware', '--concurrency-threshold', '2', ...f.stubs.flatMap((s) => ['--upstream', s.url])])
  const first = workers > 1 ? (await clientsOnDistinctWorkers(f.served.url, 2)).map((c) => c.client) : [new Client(f.served.url), new Client(f.served.url)]
  const all = [...first, new Client(f.served.url)]
  f.clients.push(...all)
  const prefix = 'The same long system prompt, shared by every request here. '.repeat(30)
  const answers: Promise<Answer>[] = []
  for (const c of all) {
    answers.push(c.chat(prefix))
    const n = answers.length
    await until(() => held() === n, 50_000, `${n} requests held upstream`)
  }
  releaseHeld(f.stubs)
  const out = (await Promise.all(answers)).map((a) => ({
    status: a.status,
    instance: a.headers['x-prefix-router-instance'],
    decision: a.headers['x-prefix-router-decision'],
    worker: a.headers['x-prefix-router-worker'],
  }))
  await untilMetric(f.served.admin, 'prefix_router_in_flight', 0)
  return out
}

describe('serve --workers: one routing state', () => {
  it('requests held through different workers count together: the third overflows, as with one process', async () => {
    const one = await sequence(1)
    await stop(f.served)
    await Promise.all(f.stubs.map((s) => s.close()))
    const two = await sequence(2)

    for (const run of [one, two]) {
      expect(run.map((a) => a.status)).toEqual([200, 200, 200])
      expect(run.map((a) => a.decision)).toEqual(['target', 'target', 'overflow'])
      expect(run[1]!.instance).toBe(run[0]!.instance)
      expect(run[2]!.instance).not.toBe(run[0]!.instance)
    }
    // One process answers without naming itself; two workers each held one of the first two.
    expect(one.map((a) => a.worker)).toEqual([undefined, undefined, undefined])
    expect(two[0]!.worker).toMatch(/^\d+$/)
    expect(two[1]!.worker).toMatch(/^\d+$/)
    expect(two[1]!.worker).not.toBe(two[0]!.worker)
  })
})
