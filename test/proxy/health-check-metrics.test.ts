// /ping and /health are the load balancer's and the orchestrator's checks, not traffic: they
// are counted in a metric of their own, and prefix_router_requests_total counts requests only.
import { afterEach, describe, expect, it } from 'vitest'
import type { ProxyServer } from '../../src/proxy/proxy.js'
import { startSimFleet, type SimFleet } from '../../src/sim/index.js'
import { chat, post, startRouter } from './helpers.js'

let fleet: SimFleet | undefined
let router: ProxyServer | undefined
afterEach(async () => {
  await router?.close()
  await fleet?.close()
  router = undefined
  fleet = undefined
})

/** The samples of `name` in the exposition text, as `{labels} value` lines. */
function samples(text: string, name: string): string[] {
  return text
    .split('\n')
    .filter((l) => l.startsWith(`${name}{`))
    .map((l) => l.slice(name.length))
}

describe('health checks in the metrics', () => {
  it('/ping and /health are counted apart, by path and status; requests_total counts the requests', async () => {
    fleet = await startSimFleet({ instances: 1, profile: 'tiny' })
    router = await startRouter(fleet.urls)
    for (let i = 0; i < 3; i++) expect((await fetch(`${router.url}/ping`)).status).toBe(200)
    for (let i = 0; i < 2; i++) expect((await fetch(`${router.url}/health`)).status).toBe(200)
    expect((await post(`${router.url}/v1/chat/completions`, chat('hello', { model: 'sim-tiny', max_tokens: 1 }))).status).toBe(200)

    const text = await router.metricsText()
    const requests = samples(text, 'prefix_router_requests_total')
    expect(requests).toHaveLength(1)
    expect(requests[0]).toMatch(new RegExp(`^\\{endpoint="default",instance="${fleet.urls[0]}",strategy="\\w+",status="200"\\} 1$`))
    expect(samples(text, 'prefix_router_health_checks_total').sort()).toEqual(['{path="/health",status="200"} 2', '{path="/ping",status="200"} 3'])
  })
})
