// The default routing keeps a shared opening's requests together: completions that open with one
// 2,700-character system prompt and ask different questions land on one instance, so the prompt
// is prefilled once. Under SageMaker's prefix_aware (the key is the first 4,096 code points,
// which reach into each question) they scattered over every instance of the fleet.
import { afterEach, describe, expect, it } from 'vitest'
import type { ProxyServer } from '../../src/proxy/proxy.js'
import { startSimFleet, type SimFleet } from '../../src/sim/index.js'
import { closeRouter, post, startRouter } from './helpers.js'

let fleet: SimFleet | undefined
let router: ProxyServer | undefined
afterEach(async () => {
  await closeRouter(router, 5000)
  await fleet?.close()
  router = undefined
  fleet = undefined
})

const MODEL = 'sim-tiny'
const SYSTEM = 'You are the help desk of ACME Rockets. Answer briefly, cite the manual. '.repeat(38).slice(0, 2700)
const QUESTIONS = Array.from({ length: 12 }, (_, i) => `Question ${i}: how do I ${['refuel', 'launch', 'land', 'store'][i % 4]} rocket model ${i * 7}?`)

async function instancesFor(r: ProxyServer): Promise<Map<string, number>> {
  const where = new Map<string, number>()
  // One after another, each answered before the next: where each goes is the strategy's choice
  // on an idle fleet, not a consequence of load.
  for (const q of QUESTIONS) {
    const res = await post(`${r.url}/v1/completions`, JSON.stringify({ model: MODEL, max_tokens: 1, prompt: `${SYSTEM}\n${q}` }))
    expect(res.status).toBe(200)
    const id = res.headers.get('x-prefix-router-instance')!
    where.set(id, (where.get(id) ?? 0) + 1)
  }
  return where
}

describe('the default strategy', () => {
  it('is longest_prefix', async () => {
    fleet = await startSimFleet({ instances: 3, profile: 'tiny' })
    router = await startRouter(fleet.urls)
    expect([...router.endpoints()][0]!.routing.strategy).toBe('longest_prefix')
  })

  it('keeps requests sharing a 2,700-character system prompt on one instance', async () => {
    expect(SYSTEM.length).toBe(2700)
    fleet = await startSimFleet({ instances: 3, profile: 'tiny' })
    router = await startRouter(fleet.urls)
    const where = await instancesFor(router)
    expect([...where.values()]).toEqual([QUESTIONS.length])
  })

  it('prefix_aware, asked for, still hashes the first 4,096 code points (SageMaker) and spreads them', async () => {
    fleet = await startSimFleet({ instances: 3, profile: 'tiny' })
    router = await startRouter(fleet.urls, { routing: { strategy: 'prefix_aware' } })
    const where = await instancesFor(router)
    expect(where.size).toBeGreaterThan(1)
  })
})
