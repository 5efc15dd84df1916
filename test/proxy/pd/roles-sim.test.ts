// A disaggregated fleet with a leg missing, against the simulator's workers on loopback: decode
// instances and no prefill instance, prefill instances and no decode instance, and a model that
// only one role serves. Each request gets its answer or a clear 503 naming the missing role, it
// is counted, and no lease is left behind (afterEach waits for every in-flight count to be 0).
import { afterEach, describe, expect, it } from 'vitest'
import { ProxyServer } from '../../../src/proxy/proxy.js'
import { startSimFleet, type SimFleet } from '../../../src/sim/index.js'
import { post, testConfig, totalInFlight, until } from '../helpers.js'

const ctx = { fleets: [] as SimFleet[], router: undefined as ProxyServer | undefined }
afterEach(async () => {
  if (ctx.router) {
    await until(() => totalInFlight(ctx.router!) === 0, 10_000, 'in-flight back to 0')
    await ctx.router.close()
  }
  await Promise.all(ctx.fleets.map((f) => f.close()))
  ctx.fleets = []
  ctx.router = undefined
})

type Fleet = { role: 'prefill' | 'decode'; model?: string }

async function router(fleets: Fleet[], disaggregation: Record<string, unknown> = {}) {
  const started = await Promise.all(fleets.map((f) => startSimFleet({ instances: 1, role: f.role, profile: 'tiny', bootstrapPort: null, ...(f.model !== undefined && { model: f.model }) })))
  ctx.fleets = started
  const instances = started.flatMap((s, i) => s.urls.map((url) => ({ url, role: fleets[i]!.role })))
  ctx.router = await ProxyServer.start(testConfig([{ name: 'default', instances }], { disaggregation: { threshold: 0, ...disaggregation } }))
  return ctx.router
}

const chatOf = (model: string, i: number) => JSON.stringify({ model, messages: [{ role: 'user', content: `Question ${i}: ${'the long shared context of the document. '.repeat(40)}` }], max_tokens: 3 })
const metric = async (r: ProxyServer, line: string) => (await r.metricsText()).split('\n').find((l) => l.startsWith(line))

describe('a disaggregated fleet with a leg missing, on the simulator', () => {
  it('decode instances and no prefill instance: every request runs whole on a decode instance, or 503 no_prefill_instance with whenNoPrefill fail', async () => {
    const r = await router([{ role: 'decode' }, { role: 'decode' }])
    for (let i = 0; i < 4; i++) {
      const res = await post(`${r.url}/v1/chat/completions`, chatOf('sim-tiny', i))
      expect(res.status, res.text).toBe(200)
      expect(JSON.parse(res.text).usage.completion_tokens).toBe(3)
    }
    expect(await metric(r, 'prefix_router_pd_requests_total{endpoint="default",path="no_prefill_instance"}')).toMatch(/ 4$/)
    expect(await metric(r, 'prefix_router_role_missing{endpoint="default",role="prefill"}')).toMatch(/ 1$/)
    r.reload({ ...r.config, disaggregation: { ...r.config.disaggregation, whenNoPrefill: 'fail' } })
    const failed = await post(`${r.url}/v1/chat/completions`, chatOf('sim-tiny', 9))
    expect(failed.status).toBe(503)
    expect(JSON.parse(failed.text).error).toMatchObject({ code: 'no_prefill_instance' })
    expect(JSON.parse(failed.text).error.message).toMatch(/prefill/)
  })

  it('prefill instances and no decode instance: 503 no_decode_instance, an OpenAI error naming the role', async () => {
    const r = await router([{ role: 'prefill' }, { role: 'prefill' }])
    const res = await post(`${r.url}/v1/chat/completions`, chatOf('sim-tiny', 1))
    expect(res.status).toBe(503)
    const err = JSON.parse(res.text).error
    expect(err).toMatchObject({ code: 'no_decode_instance', type: expect.any(String) })
    expect(err.message).toMatch(/decode/)
    expect(await metric(r, 'prefix_router_role_missing{endpoint="default",role="decode"}')).toMatch(/ 1$/)
  })

  it("a model only the prefill instances serve is refused with 503 naming the role; one only the decode instances serve runs whole there", async () => {
    const r = await router([{ role: 'prefill', model: 'only-prefill' }, { role: 'prefill' }, { role: 'decode' }, { role: 'decode', model: 'only-decode' }])
    // The router learns each instance's models from its /v1/models.
    await until(async () => (await post(`${r.url}/v1/chat/completions`, chatOf('sim-tiny', 0))).status === 200, 10_000, 'the fleet serving sim-tiny')
    const refused = await post(`${r.url}/v1/chat/completions`, chatOf('only-prefill', 1))
    expect(refused.status).toBe(503)
    const err = JSON.parse(refused.text).error
    expect(err.code).toBe('no_decode_instance')
    expect(err.message).toMatch(/only-prefill.*no instance with the decode role/)
    const whole = await post(`${r.url}/v1/chat/completions`, chatOf('only-decode', 2))
    expect(whole.status).toBe(200)
    expect(whole.headers.get('x-prefix-router-instance')).toBe(ctx.fleets[3]!.urls[0])
    expect(await metric(r, 'prefix_router_pd_requests_total{endpoint="default",path="no_prefill_instance"}')).toMatch(/ 1$/)
    // And the model both roles serve is split as usual.
    expect(await metric(r, 'prefix_router_pd_requests_total{endpoint="default",path="disaggregated"}')).toMatch(/ [1-9]\d*$/)
  })
})
