// A gateway connection that would hold the picker's memory or fill its log: streams that send
// their headers and never a body (each held until the body deadline, and no more of them open
// at once than the advertised limit), and header values of megabytes (a path, a method, a
// request id, subset-hint entries), repeated as echo() cuts them and the request id checked as
// serve checks it.
import http2 from 'node:http2'
import { pino } from 'pino'
import { describe, expect, it } from 'vitest'
import { ECHO_CHARS } from '../../src/core/echo.js'
import { eppSettings } from '../../src/commands/epp.js'
import { DEFAULT_MAX_STREAMS } from '../../src/epp/limits.js'
import { until } from '../proxy/helpers.js'
import { chatBody, settled, startRig, useRigs } from './helpers.js'
import { chatHeaders, WireGateway } from './wire.js'

useRigs()

const HUGE = 3 * 1024 * 1024
const huge = (c: string) => c.repeat(HUGE)

/** A logger keeping each line as written, and its length. */
function keptLines() {
  const lines: string[] = []
  const logger = pino({ level: 'info' }, { write: (l: string) => void lines.push(l) })
  const access = () => lines.filter((l) => l.includes('"epp request"')).map((l) => ({ length: l.length, line: JSON.parse(l) as Record<string, unknown> }))
  return { logger, lines, access }
}

describe('epp: a stream that sends its headers and never a body', () => {
  it('is answered 408 request_timeout once limits.bodyTimeoutMs has passed, as serve answers it, and ends', async () => {
    const r = await startRig(1, 'streamed', { limits: { bodyTimeoutMs: 300 } })
    const s = r.gw.open()
    s.send({ request_headers: { headers: { headers: [{ key: ':method', raw_value: Buffer.from('POST') }, { key: ':path', raw_value: Buffer.from('/v1/chat/completions') }] }, end_of_stream: false } })
    const m = await s.next()
    expect(m?.immediate_response).toBeDefined()
    const body = JSON.parse(Buffer.from(m.immediate_response.body).toString()) as { error: { code: string; message: string } }
    expect(body.error).toMatchObject({ code: 'request_timeout', message: 'request body not received within 300 ms' })
    await s.closed()
    await settled(r)
    expect(await r.epp.runtime.metricsText()).toMatch(/prefix_router_requests_total\{endpoint="default",instance="",strategy="[a-z_]+",status="408"\} 1/)
  })

  it('in buffered mode too, after the headers were answered', async () => {
    const r = await startRig(1, 'buffered', { limits: { bodyTimeoutMs: 300 } })
    const s = r.gw.open()
    s.send({ request_headers: { headers: { headers: [{ key: ':method', raw_value: Buffer.from('POST') }, { key: ':path', raw_value: Buffer.from('/v1/chat/completions') }] }, end_of_stream: false } })
    expect((await s.next())?.request_headers).toBeDefined()
    const m = await s.next()
    expect(Buffer.from(m?.immediate_response?.body ?? []).toString()).toContain('request_timeout')
    await settled(r)
  })

  it('a body that comes in time is picked and its stream is not cut afterwards by the deadline', async () => {
    const r = await startRig(1, 'streamed', { limits: { bodyTimeoutMs: 300 } })
    // Held past the deadline after the pick, then the response path: still answered.
    const res = await r.gw.chat({ body: chatBody('in time'), beforeStop: () => new Promise((resolve) => setTimeout(resolve, 500)), stopAt: 'after-pick', stop: 'half-close' })
    expect(res.header).toBe(r.pods[0])
    await res.stream.closed()
    expect(res.stream.received.some((m) => m.immediate_response)).toBe(false)
    await settled(r)
  })

  it('the gRPC port advertises SETTINGS_MAX_CONCURRENT_STREAMS: --grpc-max-streams, 256 unless given', async () => {
    expect(eppSettings({}, {}).maxStreams).toBe(DEFAULT_MAX_STREAMS)
    expect(eppSettings({ 'grpc-max-streams': '64' }, {}).maxStreams).toBe(64)
    expect(eppSettings({}, { PREFIX_ROUTER_GRPC_MAX_STREAMS: '9' }).maxStreams).toBe(9)
    expect(() => eppSettings({ 'grpc-max-streams': '0' }, {})).toThrow("--grpc-max-streams must be an integer from 1 to 65536; got '0'")
    for (const [extra, want] of [[{}, DEFAULT_MAX_STREAMS], [{ maxStreams: 4 }, 4]] as const) {
      const r = await startRig(1, 'streamed', {}, undefined, undefined, extra)
      let settingsCame = false
      const gw = await WireGateway.connect(r.epp.grpcAddress, () => (settingsCame = true))
      try {
        // The server's SETTINGS frame, once it has come (node:http2 shows its own default of 100 before).
        await until(() => settingsCame, 5000, "the picker's SETTINGS")
        expect(gw.session.remoteSettings.maxConcurrentStreams).toBe(want)
      } finally {
        gw.close()
      }
    }
  })

  it('past the limit, a client that knows it waits for a slot, and one that does not has its extra streams refused: never more held at once', async () => {
    const r = await startRig(1, 'streamed', { limits: { bodyTimeoutMs: 400 } }, undefined, undefined, { maxStreams: 4 })
    let most = 0
    const seen = setInterval(() => (most = Math.max(most, r.epp.exchanges.size)), 1)
    const twelve = (gw: WireGateway) =>
      Promise.all(
        Array.from({ length: 12 }, () => {
          const s = gw.open()
          s.write(chatHeaders())
          s.resume()
          // The picker's answer ends its side; the stream closes once this side ends too.
          s.once('end', () => s.end())
          return new Promise<number>((resolve) => s.once('close', () => resolve(s.rstCode ?? 0)))
        }),
      )
    try {
      // Opened once the picker's SETTINGS have come: node:http2 queues streams past the limit.
      let settingsCame = false
      const polite = await WireGateway.connect(r.epp.grpcAddress, () => (settingsCame = true))
      await until(() => settingsCame, 5000, "the picker's SETTINGS")
      // Every one answered in the end (408 after the deadline), four at a time.
      expect(await twelve(polite)).toEqual(Array(12).fill(http2.constants.NGHTTP2_NO_ERROR))
      expect(r.epp.streamsTaken).toBe(12)
      polite.close()
      // Opened at once, before the SETTINGS can have come: the streams past four are refused.
      const rude = await WireGateway.connect(r.epp.grpcAddress)
      const codes = await twelve(rude)
      rude.close()
      expect(codes.filter((c) => c === http2.constants.NGHTTP2_REFUSED_STREAM).length).toBeGreaterThan(0)
      expect(r.epp.streamsTaken).toBeLessThan(24)
      expect(most).toBeGreaterThan(0)
      expect(most).toBeLessThanOrEqual(4)
      await settled(r)
    } finally {
      clearInterval(seen)
    }
  })
})

describe('epp: header values of megabytes', () => {
  it('a 3 MiB :path: the 404 and the log line repeat its first characters and its length', async () => {
    const { logger, access } = keptLines()
    const r = await startRig(1, 'streamed', {}, undefined, logger)
    const res = await r.gw.chat({ body: chatBody('hi'), path: `/${huge('p')}` })
    expect(res.immediate?.status).toBe(404)
    expect(res.immediate!.body.length).toBeLessThan(1000)
    expect(res.immediate!.body).toContain(`${'p'.repeat(ECHO_CHARS - 1)}... (${HUGE + 1} characters)`)
    await until(() => access().length === 1, 5000, 'the access-log line')
    expect(access()[0]!.length).toBeLessThan(2000)
    expect(access()[0]!.line.path).toBe(`/${'p'.repeat(ECHO_CHARS - 1)}... (${HUGE + 1} characters)`)
  })

  it('a 3 MiB :method: cut in the 404 and the log line', async () => {
    const { logger, access } = keptLines()
    const r = await startRig(1, 'streamed', {}, undefined, logger)
    const s = r.gw.open()
    s.send({ request_headers: { headers: { headers: [{ key: ':method', raw_value: Buffer.from(huge('M')) }, { key: ':path', raw_value: Buffer.from('/nowhere') }] }, end_of_stream: false } })
    const m = await s.next()
    const body = Buffer.from(m.immediate_response.body).toString()
    expect(body.length).toBeLessThan(1000)
    expect(body).toContain(`(${HUGE} characters) /nowhere`)
    await until(() => access().length === 1, 5000, 'the access-log line')
    expect(access()[0]!.length).toBeLessThan(2000)
    // And with a route that exists: 405, and the log line cut the same way.
    const s2 = r.gw.open()
    s2.send({ request_headers: { headers: { headers: [{ key: ':method', raw_value: Buffer.from(huge('M')) }, { key: ':path', raw_value: Buffer.from('/v1/chat/completions') }] }, end_of_stream: false } })
    expect(Buffer.from((await s2.next()).immediate_response.body).toString()).toContain('method_not_allowed')
    await until(() => access().length === 2, 5000, 'the second access-log line')
    expect(access()[1]!.length).toBeLessThan(2000)
    expect(access()[1]!.line.method).toBe(`${'M'.repeat(ECHO_CHARS)}... (${HUGE} characters)`)
  })

  it('a 3 MiB x-request-id is replaced, as serve replaces it: a UUID of its own in the log and sent upstream', async () => {
    const { logger, access } = keptLines()
    const r = await startRig(1, 'streamed', {}, undefined, logger)
    const res = await r.gw.chat({ body: chatBody('hi'), headers: { 'x-request-id': huge('i') } })
    expect(res.status).toBe(200)
    await until(() => access().length === 1, 5000, 'the access-log line')
    const { length, line } = access()[0]!
    expect(length).toBeLessThan(2000)
    expect(line).toMatchObject({ requestIdReplaced: true, status: 200 })
    expect(line.requestId).toMatch(/^[0-9a-f]{8}-[0-9a-f]{4}-4[0-9a-f]{3}-[89ab][0-9a-f]{3}-[0-9a-f]{12}$/)
    expect(res.setHeaders?.['x-request-id']).toBe(line.requestId)
    // A usable one is kept, logged as it came and not set again.
    const ok = await r.gw.chat({ body: chatBody('hi'), headers: { 'x-request-id': 'req-7' } })
    await until(() => access().length === 2, 5000, 'the second access-log line')
    expect(access()[1]!.line).toMatchObject({ requestId: 'req-7' })
    expect(access()[1]!.line).not.toHaveProperty('requestIdReplaced')
    expect(ok.setHeaders).not.toHaveProperty('x-request-id')
  })

  it('subset-hint entries of 3 MiB: the 503 repeats each cut', async () => {
    const r = await startRig(1)
    const res = await r.gw.chat({ body: chatBody('hi'), subset: [huge('a'), huge('b').slice(0, HUGE / 4)] })
    expect(res.immediate?.status).toBe(503)
    expect(res.immediate!.body.length).toBeLessThan(1000)
    expect(res.immediate!.body).toContain(`(${HUGE} characters), ${'b'.repeat(ECHO_CHARS)}... (${HUGE / 4} characters)`)
  })
})

