// The endpoint picker behind the test gateway, in front of simulator pods: a chat goes through
// it to a pod and back, the same prefix lands on the same pod, the header and the metadata
// always agree, and the refusals come back as the OpenAI-style answers serve gives.
import { pino } from 'pino'
import { describe, expect, it } from 'vitest'
import { TENANT_HEADER } from '../../src/core/key/index.js'
import { until } from '../proxy/helpers.js'
import { chatBody, settled, startRig, useRigs } from './helpers.js'

useRigs()

const long = (d: number) => `document ${d}: ${'a paragraph of its own text. '.repeat(200)}`

describe.each(['streamed', 'buffered'] as const)('epp, %s bodies', (mode) => {
  it('a chat goes through the picker to a pod and back, its body handed back unchanged', async () => {
    const r = await startRig(2, mode)
    const body = chatBody('hello there')
    const res = await r.gw.chat({ body, chunk: 7 })
    expect(res.immediate).toBeUndefined()
    expect(r.pods).toContain(res.header)
    expect(res.metadata).toBe(res.header)
    if (mode === 'streamed') expect(res.bodyBack?.toString()).toBe(body)
    else expect(res.bodyBack).toBeUndefined()
    expect(res.status).toBe(200)
    expect(JSON.parse(res.response!).object).toBe('chat.completion')
    await settled(r)
  })

  it('the same prefix lands on the same pod; header and metadata always equal', async () => {
    const r = await startRig(4, mode)
    for (let d = 0; d < 6; d++) {
      const seen = new Set<string>()
      for (let k = 0; k < 3; k++) {
        const res = await r.gw.chat({ body: chatBody(`${long(d)} question ${k}`), chunk: 100 })
        expect(r.pods).toContain(res.header)
        expect(res.metadata).toBe(res.header)
        seen.add(res.header!)
      }
      expect(seen.size).toBe(1)
    }
  })

  it('a 300 KiB body in 64 KiB chunks: picked, and handed back byte for byte', async () => {
    const r = await startRig(2, mode)
    const body = chatBody('a long document line. '.repeat(16 * 1024))
    expect(body.length).toBeGreaterThan(300 * 1024)
    const res = await r.gw.chat({ body, chunk: 64 * 1024 })
    expect(r.pods).toContain(res.header)
    expect(res.metadata).toBe(res.header)
    if (mode === 'streamed') expect(res.bodyBack?.equals(Buffer.from(body))).toBe(true)
    // (The tiny simulated model refuses a prompt this long itself; the pick is what is tested here.)
    expect(res.status).toBeDefined()
  })

  it('400 on a body that does not parse, as serve answers it', async () => {
    const r = await startRig(1, mode)
    const res = await r.gw.chat({ body: '{"model": "tiny", "messages": [' })
    expect(res.immediate?.status).toBe(400)
    expect(res.immediate?.headers['content-type']).toBe('application/json')
    expect(JSON.parse(res.immediate!.body).error).toMatchObject({ type: 'invalid_request_error' })
  })

  it('413 over the body limit, at once', async () => {
    const r = await startRig(1, mode, { limits: { maxBodyBytes: 1024 } })
    const big = chatBody('x'.repeat(4096))
    const res = await r.gw.chat({ body: big, chunk: 512 })
    expect(res.immediate?.status).toBe(413)
    expect(JSON.parse(res.immediate!.body).error.code).toBe('request_too_large')
  })
})

describe('epp refusals and hints', () => {
  it('413 while streaming when no content-length says so first', async () => {
    const r = await startRig(1, 'streamed', { limits: { maxBodyBytes: 1024 } })
    const s = r.gw.open()
    const h = (key: string, value: string) => ({ key, raw_value: Buffer.from(value) })
    s.send({ request_headers: { headers: { headers: [h(':method', 'POST'), h(':path', '/v1/chat/completions')] }, end_of_stream: false } })
    for (let i = 0; i < 4; i++) s.send({ request_body: { body: Buffer.alloc(400, 0x20), end_of_stream: false } })
    const m = await s.next()
    expect(m.immediate_response).toBeDefined()
    expect(m.immediate_response.status.code).toBe('PayloadTooLarge')
    await s.closed()
  })

  it('the subset hint is honoured: every pick is inside it', async () => {
    const r = await startRig(4)
    const subset = [r.pods[1]!, r.pods[3]!]
    for (let d = 0; d < 12; d++) {
      const res = await r.gw.chat({ body: chatBody(long(d)), subset })
      expect(subset).toContain(res.header)
      expect(res.metadata).toBe(res.header)
    }
    const one = [r.pods[2]!]
    for (let d = 0; d < 4; d++) expect((await r.gw.chat({ body: chatBody(long(d)), subset: one })).header).toBe(one[0])
  })

  it('503 for an empty subset and for one with no eligible member', async () => {
    const r = await startRig(2)
    const empty = await r.gw.chat({ body: chatBody('hi'), subset: [] })
    expect(empty.immediate?.status).toBe(503)
    expect(JSON.parse(empty.immediate!.body).error.code).toBe('subset_empty')
    const none = await r.gw.chat({ body: chatBody('hi'), subset: ['10.255.255.1:8000'] })
    expect(none.immediate?.status).toBe(503)
    expect(JSON.parse(none.immediate!.body).error).toMatchObject({ type: 'service_unavailable', code: 'subset_not_eligible' })
  })

  it('503 with an OpenAI-style body when no instance is ready', async () => {
    const r = await startRig(1, 'streamed', {}, ['http://127.0.0.1:1'])
    const res = await r.gw.chat({ body: chatBody('hi') })
    expect(res.immediate?.status).toBe(503)
    expect(JSON.parse(res.immediate!.body).error).toMatchObject({ type: 'service_unavailable', code: 'no_healthy_instance' })
    expect(res.immediate?.headers['retry-after']).toBeDefined()
  })

  it('404 for a path the picker does not route', async () => {
    const r = await startRig(1)
    const res = await r.gw.chat({ body: chatBody('hi'), path: '/v1/unknown' })
    expect(res.immediate?.status).toBe(404)
  })

  it('a served endpoint other than the pick is counted', async () => {
    const r = await startRig(2, 'streamed', { routing: { strategy: 'prefix_aware' } })
    await r.gw.chat({ body: chatBody('hi'), served: '10.9.9.9:8000' })
    const text = await r.epp.runtime.metricsText()
    expect(text).toMatch(/prefix_router_epp_served_elsewhere_total\{endpoint="default"\} 1/)
    expect(text).toMatch(/prefix_router_requests_total\{endpoint="default",instance="[^"]+",strategy="prefix_aware",status="200"\} 1/)
  })

  it('one access-log line per stream: the pick, what was served, how it ended; the tenant only hashed', async () => {
    const lines: Record<string, unknown>[] = []
    const logger = pino({ level: 'info' }, { write: (l: string) => void lines.push(JSON.parse(l) as Record<string, unknown>) })
    const r = await startRig(2, 'streamed', {}, undefined, logger)
    const res = await r.gw.chat({ body: chatBody('logged'), headers: { [TENANT_HEADER]: 'acme', 'x-request-id': 'req-1' } })
    await r.gw.chat({ body: 'not json' })
    await until(() => lines.filter((l) => l.msg === 'epp request').length === 2, 5000, 'two access-log lines')
    const [ok, bad] = lines.filter((l) => l.msg === 'epp request')
    expect(ok).toMatchObject({ requestId: 'req-1', method: 'POST', path: '/v1/chat/completions', endpoint: 'default', picked: res.header, served: res.header, decision: 'target', model: 'sim-tiny', status: 200, ended: 'response' })
    expect(ok!.tenant).toMatch(/^[0-9a-f]{12}$/)
    expect(JSON.stringify(lines)).not.toContain('acme')
    expect(bad).toMatchObject({ status: 400, ended: 'immediate' })
  })
})
