// Disaggregated requests with vLLM's NixlConnector, on loopback, against prefill and decode
// instances that answer as vLLM does: what each leg is sent, what the client gets, and every
// failure on the way (a prefill instance down, answering an error, or answering without usable
// KV parameters; the client leaving during the prefill; a decode instance failing before its
// first byte), each ending with every lease released.
import { afterEach, describe, expect, it } from 'vitest'
import { ProxyServer } from '../../../src/proxy/proxy.js'
import { capturedLog } from '../../faults/log-lines.js'
import { chat, post, testConfig, totalInFlight, until } from '../helpers.js'
import { decodeStub, prefillStub, type PdStub } from './stubs.js'

const ctx = { stubs: [] as PdStub[], router: undefined as ProxyServer | undefined }
afterEach(async () => {
  if (ctx.router) {
    await until(() => totalInFlight(ctx.router!) === 0, 5000, 'in-flight back to 0')
    await ctx.router.close()
  }
  await Promise.all(ctx.stubs.map((s) => s.close()))
  ctx.stubs = []
  ctx.router = undefined
})

/** Two prefill and two decode instances behind a router; every request is disaggregated unless `threshold` says otherwise. */
async function pdFleet(disaggregation: Record<string, unknown> = {}, overrides: Record<string, unknown> = {}) {
  const prefill = await Promise.all([prefillStub('p0'), prefillStub('p1')])
  const decode = await Promise.all([decodeStub('d0'), decodeStub('d1')])
  ctx.stubs = [...prefill, ...decode]
  const { logger, lines } = capturedLog()
  const instances = [...prefill.map((s) => ({ url: s.url, role: 'prefill' })), ...decode.map((s) => ({ url: s.url, role: 'decode' }))]
  const config = testConfig([{ name: 'default', instances }], { disaggregation: { threshold: 0, ...disaggregation }, ...overrides })
  ctx.router = await ProxyServer.start(config, { logger })
  const router = ctx.router
  const requestLines = () => lines.filter((l) => l.msg === 'request')
  const metric = async (name: string) =>
    (await router.metricsText())
      .split('\n')
      .filter((l) => l.startsWith(name))
      .join('\n')
  return { router, prefill, decode, lines, requestLines, metric }
}

const byUrl = (stubs: PdStub[], url: string) => stubs.find((s) => s.url === url)!
const all = (stubs: PdStub[]) => stubs.flatMap((s) => s.seen)

describe('disaggregated serving with the NixlConnector', () => {
  it('sends the prefill leg one token unstreamed with remote decode asked for, then the client request with its KV parameters to the decode instance', async () => {
    const f = await pdFleet()
    const body = chat('a document '.repeat(200), { stream: true, stream_options: { include_usage: true }, max_tokens: 50, min_tokens: 10 })
    const r = await post(`${f.router.url}/v1/chat/completions`, body)
    expect(r.status).toBe(200)
    const pre = all(f.prefill)
    expect(pre).toHaveLength(1)
    expect(pre[0]!.body).toMatchObject({ stream: false, stream_options: null, max_tokens: 1, max_completion_tokens: 1, min_tokens: 1 })
    expect(pre[0]!.body.kv_transfer_params).toEqual({ do_remote_decode: true, do_remote_prefill: false, remote_engine_id: null, remote_block_ids: null, remote_host: null, remote_port: null })
    // The messages go as the client sent them.
    expect(pre[0]!.body.messages).toEqual(JSON.parse(body).messages)
    const dec = all(f.decode)
    expect(dec).toHaveLength(1)
    // The decode leg: the client's own request (streamed, its max_tokens and min_tokens), with the prefill's parameters.
    expect(dec[0]!.body).toMatchObject({ stream: true, max_tokens: 50, min_tokens: 10, stream_options: { include_usage: true } })
    const params = dec[0]!.body.kv_transfer_params as Record<string, unknown>
    expect(params).toMatchObject({ do_remote_prefill: true, do_remote_decode: false, remote_block_ids: [[1, 2, 3]], remote_host: '127.0.0.1', remote_port: 5600 })
    expect(String(params.remote_engine_id)).toMatch(/^engine-p[01]$/)
    // The request id travels with both legs.
    expect(dec[0]!.headers['x-request-id']).toBe(pre[0]!.headers['x-request-id'])
    // The answer is the decode's stream, its usage saying what the fleet did not compute (the prefill's cache hits).
    expect(r.text).toContain('"content":"a"')
    expect(r.text).toContain('"cached_tokens":32')
    expect(r.text).not.toContain('"cached_tokens":999')
    expect(r.text.endsWith('data: [DONE]\n\n')).toBe(true)
    expect(r.headers.get('x-prefix-router-instance')).toBe(dec.length === 1 ? f.decode.find((d) => d.seen.length === 1)!.url : '')
    // The access log names both legs.
    await until(() => f.requestLines().length === 1, 3000, 'the access line')
    const line = f.requestLines()[0]!
    expect(line).toMatchObject({ pd: 'disaggregated', status: 200, instance: r.headers.get('x-prefix-router-instance'), prefillRetries: 0 })
    expect(f.prefill.map((p) => p.url)).toContain(line.prefill)
    expect(typeof line.prefillMs).toBe('number')
    expect(await f.metric('prefix_router_pd_requests_total')).toContain('path="disaggregated"} 1')
    expect(await f.metric('prefix_router_pd_leg_seconds_count')).toContain('leg="prefill"} 1')
  })

  it('rewrites cached_tokens in a whole (unstreamed) answer too, with its length', async () => {
    const f = await pdFleet()
    const r = await fetch(`${f.router.url}/v1/chat/completions`, { method: 'POST', headers: { 'content-type': 'application/json' }, body: chat('doc '.repeat(300)) })
    const text = await r.text()
    expect(r.status).toBe(200)
    expect(JSON.parse(text).usage.prompt_tokens_details.cached_tokens).toBe(32)
    expect(Number(r.headers.get('content-length'))).toBe(Buffer.byteLength(text))
  })

  it('runs a prompt shorter than the threshold whole on a decode instance: no prefill leg', async () => {
    const f = await pdFleet({ threshold: 256 })
    const r = await post(`${f.router.url}/v1/chat/completions`, chat('short'))
    expect(r.status).toBe(200)
    expect(all(f.prefill)).toHaveLength(0)
    expect(all(f.decode)[0]!.body.kv_transfer_params).toBeUndefined()
    await until(() => f.requestLines().length === 1, 3000, 'the access line')
    expect(f.requestLines()[0]).toMatchObject({ pd: 'short_uncached' })
    expect(await f.metric('prefix_router_pd_requests_total')).toContain('path="short_uncached"} 1')
  })

  it('tries another prefill instance when one is down or answers 503, with no client error', async () => {
    const f = await pdFleet()
    await f.prefill[0]!.close() // connections refused from now on
    f.prefill[1]!.mode = 'ok'
    for (let i = 0; i < 6; i++) expect((await post(`${f.router.url}/v1/chat/completions`, chat(`doc ${i} `.repeat(100)))).status).toBe(200)
    expect(await f.metric('prefix_router_pd_prefill_failures_total')).toContain(`instance="${f.prefill[0]!.url}",reason="connect"`)
    // The refused instance is out of rotation now; p1 answers 503 once: every request still gets its answer.
    expect(all(f.decode).every((s) => (s.body.kv_transfer_params as { do_remote_prefill?: boolean } | undefined)?.do_remote_prefill === true)).toBe(true)
  })

  it('runs the request whole on the decode instance when every prefill try fails, or answers 502 with whenNoPrefill fail', async () => {
    const f = await pdFleet()
    for (const p of f.prefill) {
      p.mode = 'status'
      p.status = 503
    }
    const r = await post(`${f.router.url}/v1/chat/completions`, chat('doc '.repeat(300)))
    expect(r.status).toBe(200)
    expect(all(f.prefill)).toHaveLength(2) // both tried
    const dec = all(f.decode)
    expect(dec).toHaveLength(1)
    expect(dec[0]!.body.kv_transfer_params).toBeUndefined() // decode-only: the client's own request
    expect(JSON.parse(r.text).usage.prompt_tokens_details.cached_tokens).toBe(0) // its own figure, untouched
    await until(() => f.requestLines().length === 1, 3000, 'the access line')
    expect(f.requestLines()[0]).toMatchObject({ pd: 'prefill_failed', prefillRetries: 1 })
    expect(await f.metric('prefix_router_pd_requests_total')).toContain('path="prefill_failed"} 1')
    ctx.router!.reload({ ...ctx.router!.config, disaggregation: { ...ctx.router!.config.disaggregation, whenNoPrefill: 'fail' } })
    const failed = await post(`${f.router.url}/v1/chat/completions`, chat('other doc '.repeat(300)))
    expect(failed.status).toBe(502)
    expect(JSON.parse(failed.text).error).toMatchObject({ code: 'prefill_failed', type: 'upstream_error' })
    expect(JSON.parse(failed.text).error.message).toMatch(/no prefill instance gave usable KV parameters; the last failed: 503/)
  })

  it.each([
    ['no_params', 'missing_params'],
    ['malformed', 'malformed_params'],
    ['stream', 'streamed_answer'],
  ] as const)('a prefill answer with %s is counted (%s) and never reaches a decode instance as parameters', async (mode, reason) => {
    const f = await pdFleet()
    for (const p of f.prefill) p.mode = mode
    const r = await post(`${f.router.url}/v1/chat/completions`, chat('doc '.repeat(300)))
    expect(r.status).toBe(200)
    expect(all(f.decode)).toHaveLength(1)
    expect(all(f.decode)[0]!.body.kv_transfer_params).toBeUndefined()
    expect(await f.metric('prefix_router_pd_prefill_failures_total')).toContain(`reason="${reason}"} 1`)
    await until(() => f.requestLines().length === 1, 3000, 'the access line')
    expect(f.requestLines()[0]).toMatchObject({ pd: 'prefill_failed', kvParams: reason })
    expect(f.lines.some((l) => l.msg === 'prefill leg failed' && l.reason === reason)).toBe(true)
  })

  it("passes a prefill instance's refusal (a 4xx) to the client, with no decode leg", async () => {
    const f = await pdFleet()
    for (const p of f.prefill) {
      p.mode = 'status'
      p.status = 400
    }
    const r = await post(`${f.router.url}/v1/chat/completions`, chat('doc '.repeat(300)))
    expect(r.status).toBe(400)
    expect(JSON.parse(r.text).error.message).toBe('prefill says 400')
    expect(all(f.prefill)).toHaveLength(1)
    expect(all(f.decode)).toHaveLength(0)
  })

  it('aborts the prefill leg when the client leaves during it, and sends no decode leg', async () => {
    const f = await pdFleet()
    for (const p of f.prefill) p.mode = 'hold'
    const ac = new AbortController()
    const pending = fetch(`${f.router.url}/v1/chat/completions`, { method: 'POST', body: chat('doc '.repeat(300)), headers: { 'content-type': 'application/json' }, signal: ac.signal }).catch((e: Error) => e)
    await until(() => f.prefill.some((p) => p.held.length === 1), 5000, 'the prefill leg held')
    ac.abort()
    await pending
    await until(() => f.prefill.some((p) => p.closedEarly === 1), 5000, 'the prefill request aborted')
    await until(() => totalInFlight(f.router) === 0, 5000, 'leases released')
    expect(all(f.decode)).toHaveLength(0)
    await until(() => f.requestLines().length === 1, 3000, 'the access line')
    expect(f.requestLines()[0]).toMatchObject({ status: 499 })
  })

  it('tries the decode leg on another decode instance with the same parameters when the first cannot be reached', async () => {
    const f = await pdFleet()
    const r1 = await post(`${f.router.url}/v1/chat/completions`, chat('doc '.repeat(300)))
    const first = byUrl(f.decode, r1.headers.get('x-prefix-router-instance')!)
    const other = f.decode.find((d) => d !== first)!
    await first.close()
    // The same prompt again: its decode instance is the one that held it, now refusing connections.
    const r = await post(`${f.router.url}/v1/chat/completions`, chat('doc '.repeat(300)))
    expect(r.status).toBe(200)
    expect(r.headers.get('x-prefix-router-instance')).toBe(other.url)
    // One prefill leg for the request: the parameters were reused.
    expect(all(f.prefill)).toHaveLength(2)
    expect(await f.metric('prefix_router_pd_decode_retries_total')).toContain('params="same"} 1')
  })

  it('prefills again before trying another decode instance when the first read the request and failed', async () => {
    const f = await pdFleet()
    for (const d of f.decode) {
      d.mode = 'status'
      d.status = 503
    }
    // The first decode try answers 503; let the second succeed wherever it goes.
    let answered = 0
    const orig = f.decode.map((d) => d.seen.length)
    void orig
    const flip = setInterval(() => {
      if (all(f.decode).length >= 1 && answered === 0) {
        answered = 1
        for (const d of f.decode) d.mode = 'ok'
      }
    }, 1)
    try {
      const r = await post(`${f.router.url}/v1/chat/completions`, chat('doc '.repeat(300)))
      expect(r.status).toBe(200)
    } finally {
      clearInterval(flip)
    }
    const dec = all(f.decode)
    expect(dec).toHaveLength(2)
    // Two prefill legs, each decode try with the parameters of its own.
    expect(all(f.prefill)).toHaveLength(2)
    const ids = dec.map((s) => (s.body.kv_transfer_params as { remote_request_id: string }).remote_request_id)
    expect(new Set(ids).size).toBe(2)
    expect(await f.metric('prefix_router_pd_decode_retries_total')).toContain('params="new"} 1')
  })

  it('sends the request whole to another decode instance when one refuses the KV parameters (a 4xx), counted as decode_refused', async () => {
    const f = await pdFleet()
    const first = await post(`${f.router.url}/v1/chat/completions`, chat('doc '.repeat(300)))
    const refusing = byUrl(f.decode, first.headers.get('x-prefix-router-instance')!)
    refusing.mode = 'refuse_params'
    for (const s of [...f.prefill, ...f.decode]) s.seen.length = 0
    // The same prompt: its decode instance is the one holding it, which now refuses parameters.
    const r = await post(`${f.router.url}/v1/chat/completions`, chat('doc '.repeat(300)))
    expect(r.status).toBe(200)
    const other = f.decode.find((d) => d !== refusing)!
    expect(r.headers.get('x-prefix-router-instance')).toBe(other.url)
    expect(refusing.seen).toHaveLength(1)
    expect(refusing.seen[0]!.body.kv_transfer_params).toBeDefined()
    expect(other.seen).toHaveLength(1)
    expect(other.seen[0]!.body.kv_transfer_params).toBeUndefined() // whole: the client's own body
    expect(await f.metric('prefix_router_pd_prefill_failures_total')).toContain('reason="decode_refused"} 1')
    await until(() => f.requestLines().length === 2, 3000, 'the access lines')
    expect(f.requestLines()[1]).toMatchObject({ pd: 'prefill_failed', kvParams: 'decode_refused', retries: 1 })
    expect(f.lines.some((l) => String(l.msg).startsWith('the decode instance refused the KV parameters') && l.reason === 'decode_refused')).toBe(true)
  })

  it('answers 503 naming the missing role when no decode instance serves', async () => {
    const prefill = await Promise.all([prefillStub('p0')])
    ctx.stubs = prefill
    ctx.router = await ProxyServer.start(testConfig([{ name: 'default', instances: [{ url: prefill[0]!.url, role: 'prefill' }] }], { log: { level: 'silent' } }))
    const r = await post(`${ctx.router.url}/v1/chat/completions`, chat('doc '.repeat(300)))
    expect(r.status).toBe(503)
    expect(JSON.parse(r.text).error).toMatchObject({ code: 'no_decode_instance' })
    expect(all(prefill)).toHaveLength(0)
  })
})
