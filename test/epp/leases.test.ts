// Whatever the gateway does, a request's lease is released once and the in-flight counts go
// back to 0: a normal end, a cancel before the body, after the pick before the response, in
// the middle of the response body, a half-close without the response path, and a gateway
// that cuts the stream while the lease is held. Waited for by count, never by time.
import { describe, expect, it } from 'vitest'
import { until } from '../proxy/helpers.js'
import { chatBody, inFlight, settled, startRig, useRigs } from './helpers.js'

useRigs()

async function ended(r: Awaited<ReturnType<typeof startRig>>, how: string): Promise<number> {
  const text = await r.epp.runtime.metricsText()
  const m = new RegExp(`prefix_router_epp_streams_ended_total\\{how="${how}"\\} (\\d+)`).exec(text)
  return m ? Number(m[1]) : 0
}

describe.each(['streamed', 'buffered'] as const)('epp leases, %s bodies', (mode) => {
  it('a normal exchange: released when the response body ends', async () => {
    const r = await startRig(2, mode)
    for (let i = 0; i < 5; i++) await r.gw.chat({ body: chatBody(`hello ${i}`) })
    await settled(r)
    expect(await ended(r, 'response')).toBe(5)
  })

  it.each(['cancel', 'half-close'] as const)('stopped before the body (%s): nothing leased, the stream ends', async (stop) => {
    const r = await startRig(2, mode)
    await r.gw.chat({ body: chatBody('hi'), stopAt: 'before-body', stop, beforeStop: () => until(() => r.epp.streamsTaken === 1, 5000, 'the picker taking the stream') })
    await settled(r)
    expect(await ended(r, 'cut')).toBe(1)
  })

  it.each(['cancel', 'half-close'] as const)('stopped after the pick, before the response (%s): the lease is held, then released', async (stop) => {
    const r = await startRig(2, mode)
    const s = r.gw.open()
    const h = (key: string, value: string) => ({ key, raw_value: Buffer.from(value) })
    const body = Buffer.from(chatBody('held'))
    s.send({ request_headers: { headers: { headers: [h(':method', 'POST'), h(':path', '/v1/chat/completions')] }, end_of_stream: false } })
    if (mode === 'buffered') await s.next()
    s.send({ request_body: { body, end_of_stream: true } })
    const m = await s.next()
    expect(m[mode === 'buffered' ? 'request_body' : 'request_headers']).toBeDefined()
    // Leased now, and held while the gateway has not ended the stream.
    expect(inFlight(r)).toBe(1)
    if (stop === 'cancel') s.cancel()
    else s.halfClose()
    await settled(r)
    expect(await ended(r, 'cut')).toBe(1)
  })

  it.each(['cancel', 'half-close'] as const)('stopped in the middle of the response body (%s)', async (stop) => {
    const r = await startRig(2, mode)
    await r.gw.chat({ body: chatBody('streaming please', { stream: true, max_tokens: 8 }), stopAt: 'mid-response', stop })
    await settled(r)
    expect(await ended(r, 'cut')).toBe(1)
  })

  it.each(['cancel', 'half-close'] as const)('a gateway that never sends the response path (%s): the stream end releases it', async (stop) => {
    const r = await startRig(2, mode)
    await r.gw.chat({ body: chatBody('no response path'), stopAt: 'no-response-path', stop })
    await settled(r)
    expect(await ended(r, 'cut')).toBe(1)
  })
})

describe('epp and longest_prefix', () => {
  it("the response path's first message is the first token: queued prefill ends there, the lease at the body's end", async () => {
    const r = await startRig(2, 'streamed', { routing: { strategy: 'longest_prefix' } })
    const s = r.gw.open()
    const h = (key: string, value: string) => ({ key, raw_value: Buffer.from(value) })
    s.send({ request_headers: { headers: { headers: [h(':method', 'POST'), h(':path', '/v1/chat/completions')] }, end_of_stream: false } })
    s.send({ request_body: { body: Buffer.from(chatBody('a prompt long enough to fill blocks. '.repeat(200))), end_of_stream: true } })
    const picked = (await s.next()).request_headers.response.header_mutation.set_headers[0].header.raw_value.toString()
    await s.next() // the body handed back
    const router = r.epp.runtime.endpoint(undefined)!.router
    const at = () => router.instances().find((i) => new URL(i.id).host === picked)!
    expect(at().inFlight).toBe(1)
    expect(at().queuedPrefillBlocks).toBeGreaterThan(0)
    s.send({ response_headers: { headers: { headers: [h(':status', '200')] }, end_of_stream: false } })
    expect((await s.next()).response_headers).toBeDefined()
    expect(at().queuedPrefillBlocks).toBe(0)
    expect(at().inFlight).toBe(1)
    s.send({ response_body: { body: Buffer.from('{}'), end_of_stream: true } })
    expect((await s.next()).response_body).toBeDefined()
    s.halfClose()
    await settled(r)
    expect(await ended(r, 'response')).toBe(1)
  })
})

describe('epp leases under many streams', () => {
  it('a gateway that half-closes right after the body still gets its pick, then the lease is released', async () => {
    const r = await startRig(2)
    const s = r.gw.open()
    const h = (key: string, value: string) => ({ key, raw_value: Buffer.from(value) })
    s.send({ request_headers: { headers: { headers: [h(':method', 'POST'), h(':path', '/v1/chat/completions')] }, end_of_stream: false } })
    s.send({ request_body: { body: Buffer.from(chatBody('and gone')), end_of_stream: true } })
    s.halfClose()
    const m = await s.next()
    expect(m.request_headers.response.header_mutation.set_headers[0].header.key).toBe('x-gateway-destination-endpoint')
    await s.closed()
    await settled(r)
    expect(await ended(r, 'cut')).toBe(1)
  })

  it('interleaved streams, some cut at each stage, leave nothing in flight', async () => {
    const r = await startRig(3)
    const stages = [undefined, 'before-body', 'after-pick', 'mid-response', 'no-response-path'] as const
    await Promise.all(Array.from({ length: 20 }, (_, i) => r.gw.chat({ body: chatBody(`req ${i}`, { stream: true, max_tokens: 4 }), stopAt: stages[i % stages.length], stop: i % 2 ? 'cancel' : 'half-close' })))
    await settled(r)
    // A stream cancelled with its first message may never reach the picker: every one that did is counted ended.
    await until(async () => (await ended(r, 'response')) + (await ended(r, 'cut')) === r.epp.streamsTaken, 5000, 'every stream taken counted ended')
    expect(await ended(r, 'response')).toBe(4)
  })

  it('the picker closing cuts the streams still open and releases their leases', async () => {
    const r = await startRig(2)
    const res = await r.gw.chat({ body: chatBody('held at close'), served: null })
    expect(res.status).toBe(200)
    const s = r.gw.open()
    const h = (key: string, value: string) => ({ key, raw_value: Buffer.from(value) })
    s.send({ request_headers: { headers: { headers: [h(':method', 'POST'), h(':path', '/v1/chat/completions')] }, end_of_stream: false } })
    s.send({ request_body: { body: Buffer.from(chatBody('held')), end_of_stream: true } })
    await s.next()
    expect(inFlight(r)).toBe(1)
    const [x] = [...r.epp.exchanges]
    expect(x!.lease?.released).toBe(false)
    await r.epp.close()
    await s.closed()
    // The exchange ended as its stream was cut, and released its lease.
    expect(r.epp.exchanges.size).toBe(0)
    expect(x!.ended).toBe(true)
    expect(x!.lease?.released).toBe(true)
  })
})
