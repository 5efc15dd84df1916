// Disaggregated serving end to end on loopback: serve in front of the simulator's prefill and
// decode workers (which hold, pull and count KV as vLLM's NixlConnector does), driven by the
// openai SDK. The decode workers compute no prompt; a flaky prefill instance costs no client an
// error; with every prefill instance down, the decode instances serve every request whole.
import OpenAI from 'openai'
import { afterEach, describe, expect, it } from 'vitest'
import { ProxyServer } from '../../../src/proxy/proxy.js'
import { startSimFleet, type SimFleet } from '../../../src/sim/index.js'
import { capturedLog } from '../../faults/log-lines.js'
import { testConfig, totalInFlight, until } from '../helpers.js'

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

async function pd(opts: { prefillFaults?: object; faultInstances?: number[]; connector?: 'nixl' | 'sglang' } = {}) {
  const prefill = await startSimFleet({ instances: 2, role: 'prefill', profile: 'tiny', ...(opts.prefillFaults !== undefined && { faults: opts.prefillFaults, faultInstances: opts.faultInstances }), ...(opts.connector === 'sglang' ? { bootstrapPort: 0 } : {}) })
  const decode = await startSimFleet({ instances: 2, role: 'decode', profile: 'tiny' })
  ctx.fleets = [prefill, decode]
  const { logger, lines } = capturedLog()
  const instances = [
    ...prefill.urls.map((url, i) => ({ url, role: 'prefill', ...(prefill.bootstrapPorts?.[i] !== undefined && { bootstrapPort: prefill.bootstrapPorts[i] }) })),
    ...decode.urls.map((url) => ({ url, role: 'decode' })),
  ]
  ctx.router = await ProxyServer.start(testConfig([{ name: 'default', instances }], { disaggregation: { connector: opts.connector ?? 'nixl', threshold: 0 } }), { logger })
  const client = new OpenAI({ baseURL: `${ctx.router.url}/v1`, apiKey: 'unused', maxRetries: 0 })
  const state = async (f: SimFleet, i: number) => (await (await fetch(`${f.urls[i]}/sim/state`)).json()) as Record<string, any>
  return { prefill, decode, router: ctx.router, client, lines, state }
}

const question = (i: number) => `Section ${i}. ${'The quarterly report covers revenue, costs and the outlook for each region. '.repeat(12)} What changed in region ${i}?`

describe('serve with simulated prefill and decode workers', () => {
  it('answers a streamed chat through the openai SDK: the prefill worker computes the prompt, the decode worker only pulls it and decodes', async () => {
    const f = await pd()
    const stream = await f.client.chat.completions.create({ model: 'sim-tiny', messages: [{ role: 'user', content: question(1) }], max_tokens: 8, stream: true, stream_options: { include_usage: true } })
    let text = ''
    let usage: OpenAI.CompletionUsage | undefined
    for await (const chunk of stream) {
      text += chunk.choices[0]?.delta?.content ?? ''
      if (chunk.usage) usage = chunk.usage
    }
    expect(text.length).toBeGreaterThan(0)
    expect(usage!.completion_tokens).toBe(8)
    // Nothing of this new prompt was cached anywhere: the router says so, not the decode's count of what it received.
    expect(usage!.prompt_tokens_details?.cached_tokens).toBe(0)
    const decodeStates = await Promise.all([0, 1].map((i) => f.state(f.decode, i)))
    const prefillStates = await Promise.all([0, 1].map((i) => f.state(f.prefill, i)))
    const computedDecode = decodeStates.reduce((n, s) => n + s.prompt_tokens_computed, 0)
    const computedPrefill = prefillStates.reduce((n, s) => n + s.prompt_tokens_computed, 0)
    expect(computedPrefill).toBe(usage!.prompt_tokens)
    // vLLM's decode recomputes the prompt's last token to sample from it, and nothing more.
    expect(computedDecode).toBe(1)
    await until(() => f.lines.some((l) => l.msg === 'request'), 3000, 'the access line')
    const line = f.lines.find((l) => l.msg === 'request')!
    expect(line).toMatchObject({ pd: 'disaggregated', status: 200 })
    expect(f.prefill.urls).toContain(line.prefill)
    expect(f.decode.urls).toContain(line.instance)
  })

  it('with one of two prefill instances failing 30% of its requests: no client error', async () => {
    const f = await pd({ prefillFaults: { errorRate: 0.3, errorStatus: 503, seed: 7 }, faultInstances: [0] })
    const statuses: number[] = []
    for (let i = 0; i < 40; i++) {
      const r = await fetch(`${f.router.url}/v1/chat/completions`, { method: 'POST', headers: { 'content-type': 'application/json' }, body: JSON.stringify({ model: 'sim-tiny', messages: [{ role: 'user', content: question(i % 7) }], max_tokens: 4 }) })
      await r.text()
      statuses.push(r.status)
    }
    expect(statuses.every((s) => s === 200)).toBe(true)
    const metrics = await f.router.metricsText()
    // The faulty instance failed some prefill legs, each tried again on the other.
    expect(metrics).toMatch(new RegExp(`prefix_router_pd_prefill_failures_total\\{endpoint="default",instance="${f.prefill.urls[0]}",reason="503"\\} [1-9]`))
    expect(metrics).toMatch(/prefix_router_pd_requests_total\{endpoint="default",path="disaggregated"\} 40/)
  })

  it('with every prefill instance down: the decode instances serve every request whole', async () => {
    const f = await pd()
    await Promise.all(f.prefill.workers.map((w) => w.stop()))
    for (let i = 0; i < 10; i++) {
      const r = await f.client.chat.completions.create({ model: 'sim-tiny', messages: [{ role: 'user', content: question(i) }], max_tokens: 4 })
      expect(r.choices[0]!.message.content!.length).toBeGreaterThan(0)
    }
    const metrics = await f.router.metricsText()
    // The first tries found the prefill instances down (marked down then); later requests go decode-only at once.
    expect(metrics).toMatch(/prefix_router_pd_requests_total\{endpoint="default",path="(prefill_failed|no_prefill_instance)"\} \d+/)
    const decodeStates = await Promise.all([0, 1].map((i) => f.state(f.decode, i)))
    expect(decodeStates.reduce((n, s) => n + s.prompt_tokens_computed, 0)).toBeGreaterThan(10 * 100)
  })

  it("SGLang's flow between live workers: both legs at once through the prefill worker's bootstrap server", async () => {
    const f = await pd({ connector: 'sglang' })
    const r = await f.client.chat.completions.create({ model: 'sim-tiny', messages: [{ role: 'user', content: question(3) }], max_tokens: 6 })
    expect(r.usage!.completion_tokens).toBe(6)
    const decodeStates = await Promise.all([0, 1].map((i) => f.state(f.decode, i)))
    expect(decodeStates.reduce((n, s) => n + s.prompt_tokens_computed, 0)).toBe(1)
  })
})
