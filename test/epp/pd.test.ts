// The endpoint picker in a disaggregated pool, as llm-d deploys one: the picker names the decode
// pod as the destination and the prefill pod in x-prefiller-host-port; a sidecar on each decode
// pod (serve --sidecar, in front of the pod's vLLM) sends the prefill leg there, then the
// request with its KV parameters to its vLLM. Simulated prefill and decode workers, the test
// gateway applying the picker's header mutation as Envoy does.
import { afterEach, describe, expect, it } from 'vitest'
import { EppServer } from '../../src/epp/server.js'
import { PREFILLER } from '../../src/epp/messages.js'
import { ProxyServer } from '../../src/proxy/proxy.js'
import { startSimFleet, type SimFleet } from '../../src/sim/index.js'
import { capturedLog } from '../faults/log-lines.js'
import { post, testConfig, totalInFlight, until } from '../proxy/helpers.js'
import { TestGateway } from './gateway.js'
import { chatBody, MODEL } from './helpers.js'

const open = { fleets: [] as SimFleet[], servers: [] as ProxyServer[], epp: undefined as EppServer | undefined, gw: undefined as TestGateway | undefined }
afterEach(async () => {
  open.gw?.close()
  if (open.epp) {
    await until(() => open.epp!.exchanges.size === 0 && totalInFlight(open.epp!.runtime) === 0, 5000, 'picker streams ended')
    await open.epp.close()
  }
  for (const s of open.servers) {
    await until(() => totalInFlight(s) === 0, 5000, 'sidecar leases released')
    await s.close()
  }
  await Promise.all(open.fleets.map((f) => f.close()))
  Object.assign(open, { fleets: [], servers: [], epp: undefined, gw: undefined })
})

async function pool(sidecarAllow: string[] = []) {
  const prefill = await startSimFleet({ instances: 2, role: 'prefill', profile: 'tiny' })
  const decode = await startSimFleet({ instances: 2, role: 'decode', profile: 'tiny' })
  open.fleets.push(prefill, decode)
  // One sidecar per decode pod, in front of its vLLM.
  const logs = decode.urls.map(() => capturedLog())
  for (const [i, url] of decode.urls.entries()) {
    open.servers.push(await ProxyServer.start(testConfig([{ name: 'default', instances: [url] }], { sidecar: { enabled: true, allow: sidecarAllow } }), { logger: logs[i]!.logger }))
  }
  const sidecars = open.servers.map((s) => s.url)
  const instances = [...prefill.urls.map((url) => ({ url, role: 'prefill' })), ...sidecars.map((url) => ({ url, role: 'decode' }))]
  const eppLog = capturedLog()
  open.epp = await EppServer.start(testConfig([{ name: 'default', instances }], { disaggregation: { threshold: 0 } }), { grpcHost: '127.0.0.1', grpcPort: 0, bodyMode: 'streamed', logger: eppLog.logger })
  open.gw = new TestGateway(open.epp.grpcAddress, 'streamed')
  const state = async (f: SimFleet, i: number) => (await (await fetch(`${f.urls[i]}/sim/state`)).json()) as Record<string, any>
  return { prefill, decode, sidecars, gw: open.gw, logs, eppLog, state, epp: open.epp }
}

const host = (url: string) => new URL(url).host
const doc = (i: number) => `Report ${i}: ${'each region grew, costs fell, and the outlook held. '.repeat(15)}`

describe('the endpoint picker with prefill and decode pods', () => {
  it('names the decode pod (its sidecar) as the destination and the prefill pod for the sidecar, which runs both legs', async () => {
    const p = await pool()
    const res = await p.gw.chat({ body: chatBody(doc(1), { max_tokens: 4 }), chunk: 256 })
    expect(res.status).toBe(200)
    expect(p.sidecars.map(host)).toContain(res.header)
    const prefiller = res.setHeaders![PREFILLER]!
    expect(p.prefill.urls.map(host)).toContain(prefiller)
    expect(JSON.parse(res.response!).choices[0].finish_reason).toBe('length')
    // The prefill pod computed the prompt, the decode pod only its last token.
    const computed = async (f: SimFleet) => (await Promise.all([0, 1].map((i) => p.state(f, i)))).reduce((n, s) => n + s.prompt_tokens_computed, 0)
    expect(await computed(p.decode)).toBe(1)
    expect(await computed(p.prefill)).toBeGreaterThan(100)
    // The sidecar that served logged both legs; the picker logged the prefill pod.
    const i = p.sidecars.map(host).indexOf(res.header!)
    const served = (l: Record<string, unknown>) => l.msg === 'request' && l.path === '/v1/chat/completions'
    await until(() => p.logs[i]!.lines.some(served), 3000, 'the sidecar access line')
    expect(p.logs[i]!.lines.find(served)).toMatchObject({ pd: 'disaggregated', prefill: `http://${prefiller}` })
    await until(() => p.eppLog.lines.some((l) => l.msg === 'epp request'), 3000, 'the picker line')
    expect(p.eppLog.lines.find((l) => l.msg === 'epp request')!.prefill).toBe(`http://${prefiller}`)
  })

  it('a request the picker runs whole has a client-sent x-prefiller-host-port removed', async () => {
    const p = await pool()
    // A threshold no prompt reaches: every request runs whole on its decode pod.
    p.epp.runtime.reload({ ...p.epp.runtime.config, disaggregation: { ...p.epp.runtime.config.disaggregation, threshold: 100_000 } })
    const res = await p.gw.chat({ body: chatBody('hello', { max_tokens: 2 }), headers: { [PREFILLER]: '10.9.9.9:80' } })
    expect(res.status).toBe(200)
    expect(res.removeHeaders).toContain(PREFILLER)
    expect(res.setHeaders![PREFILLER]).toBeUndefined()
  })
})

describe('serve --sidecar', () => {
  it('refuses a malformed prefill pod (400) and one outside sidecar.allow (403), and passes a request without the header straight on', async () => {
    const decode = await startSimFleet({ instances: 1, role: 'decode', profile: 'tiny' })
    open.fleets.push(decode)
    const s = await ProxyServer.start(testConfig([{ name: 'default', instances: decode.urls }], { sidecar: { enabled: true, allow: ['10.0.0.0/8', 'prefill.example:8000'] }, log: { level: 'silent' } }))
    open.servers.push(s)
    const body = JSON.stringify({ model: MODEL, messages: [{ role: 'user', content: 'hi' }], max_tokens: 2 })
    const bad = await post(`${s.url}/v1/chat/completions`, body, { [PREFILLER]: 'not a host' })
    expect(bad.status).toBe(400)
    expect(JSON.parse(bad.text).error).toMatchObject({ code: 'invalid_prefiller' })
    const denied = await post(`${s.url}/v1/chat/completions`, body, { [PREFILLER]: '192.168.1.5:8000' })
    expect(denied.status).toBe(403)
    expect(JSON.parse(denied.text).error.message).toMatch(/not one this sidecar may send to/)
    const plain = await post(`${s.url}/v1/chat/completions`, body)
    expect(plain.status).toBe(200)
  })

  it('runs the request whole on its vLLM when the named prefill pod cannot be reached', async () => {
    const decode = await startSimFleet({ instances: 1, role: 'decode', profile: 'tiny' })
    open.fleets.push(decode)
    const { logger, lines } = capturedLog()
    const s = await ProxyServer.start(testConfig([{ name: 'default', instances: decode.urls }], { sidecar: { enabled: true } }), { logger })
    open.servers.push(s)
    expect(lines.some((l) => l.level === 40 && /sidecar: any prefill pod/.test(String(l.msg)))).toBe(true)
    const r = await post(`${s.url}/v1/chat/completions`, JSON.stringify({ model: MODEL, messages: [{ role: 'user', content: doc(2) }], max_tokens: 2 }), { [PREFILLER]: '127.0.0.1:9' })
    expect(r.status).toBe(200)
    const served = (l: Record<string, unknown>) => l.msg === 'request' && l.path === '/v1/chat/completions'
    await until(() => lines.some(served), 3000, 'the access line')
    expect(lines.find(served)).toMatchObject({ pd: 'prefill_failed', prefill: 'http://127.0.0.1:9' })
    expect(await s.metricsText()).toContain('prefix_router_pd_prefill_failures_total{endpoint="default",instance="http://127.0.0.1:9",reason="connect"} 1')
  })
})
