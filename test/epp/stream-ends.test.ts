// Every way an ext_proc stream ends on the wire ends its Exchange in the picker and releases
// its lease: a reset right behind the request headers (in the same write, the next turn, or once
// the picker holds the stream), a reset after the pick and in the middle of the response path,
// the gateway's connection cut under open streams, and a grpc-timeout that runs out; and Envoy's
// default end of every finished stream (a half-close and a reset at once), past Node's HTTP/2
// reset limit, costing no stream.
import http2 from 'node:http2'
import { describe, expect, it } from 'vitest'
import { until } from '../proxy/helpers.js'
import { chatBody, inFlight, settled, startRig, useRigs } from './helpers.js'
import { bodyFrame, chatHeaders, frame, WireGateway } from './wire.js'

useRigs()

const CANCEL = http2.constants.NGHTTP2_CANCEL

describe('epp: a stream ends in the picker however it ends on the wire', () => {
  it('reset right behind its request headers: in the same write, a turn later, or once the picker holds it', async () => {
    const r = await startRig(1)
    const gw = await WireGateway.connect(r.epp.grpcAddress)
    try {
      for (let i = 0; i < 60; i++) {
        const s = gw.open()
        s.write(chatHeaders())
        if (i % 3 === 0) s.close(CANCEL)
        else if (i % 3 === 1) setImmediate(() => s.close(CANCEL))
        else {
          const taken = r.epp.streamsTaken
          await until(() => r.epp.streamsTaken > taken, 5000, 'the picker taking the stream')
          s.close(CANCEL)
        }
      }
      // A stream answered after them: the picker has read every frame before it, the resets too.
      const last = gw.open()
      last.write(chatHeaders())
      last.write(bodyFrame(chatBody('after the resets')))
      await WireGateway.firstData(last)
      last.close(CANCEL)
      expect(r.epp.streamsTaken).toBeGreaterThan(40)
      await settled(r)
    } finally {
      gw.close()
    }
  })

  it('reset after the pick and in the middle of the response path: each lease held, then released', async () => {
    const r = await startRig(2)
    const gw = await WireGateway.connect(r.epp.grpcAddress)
    try {
      const streams = await Promise.all(
        Array.from({ length: 10 }, async (_, i) => {
          const s = gw.open()
          s.write(chatHeaders())
          s.write(bodyFrame(chatBody(`held ${i}`)))
          await WireGateway.firstData(s)
          if (i % 2) s.write(frame({ response_headers: { headers: { headers: [{ key: ':status', raw_value: Buffer.from('200') }] }, end_of_stream: false } }))
          return s
        }),
      )
      expect(inFlight(r)).toBe(10)
      for (const s of streams) s.close(CANCEL)
      await settled(r)
    } finally {
      gw.close()
    }
  })

  it("the gateway's connection cut under streams holding leases", async () => {
    const r = await startRig(2)
    const gw = await WireGateway.connect(r.epp.grpcAddress)
    const socket = gw.socket
    await Promise.all(
      Array.from({ length: 10 }, async (_, i) => {
        const s = gw.open()
        s.write(chatHeaders())
        s.write(bodyFrame(chatBody(`cut ${i}`)))
        await WireGateway.firstData(s)
      }),
    )
    expect(inFlight(r)).toBe(10)
    // No GOAWAY, no RST_STREAM: the TCP connection is gone.
    socket.destroy()
    await settled(r)
  })

  it('a grpc-timeout that runs out while the lease is held', async () => {
    const r = await startRig(2)
    const gw = await WireGateway.connect(r.epp.grpcAddress)
    try {
      const s = gw.open({ 'grpc-timeout': '300m' })
      s.write(chatHeaders())
      s.write(bodyFrame(chatBody('timed')))
      await WireGateway.firstData(s)
      expect(inFlight(r)).toBe(1)
      const trailers = new Promise<http2.IncomingHttpHeaders>((resolve) => s.once('trailers', resolve))
      // DEADLINE_EXCEEDED, from grpc-js's timer: the picker's side of the stream is over.
      expect((await trailers)['grpc-status']).toBe('4')
      await settled(r)
    } finally {
      gw.close()
    }
  })

  it("Envoy's default end of each finished stream (half-close, then a reset at once), 1,200 times: every exchange completes, connections are recycled gracefully, never cut", async () => {
    const r = await startRig(2)
    // A gateway that opens a new connection when the picker asks it to go away, as Envoy's does.
    let gw = await WireGateway.connect(r.epp.grpcAddress)
    const codes: number[] = []
    const watch = (g: WireGateway) => g.session.on('goaway', (code: number) => codes.push(code))
    watch(gw)
    const gateways = [gw]
    // The gRPC messages a stream has brought (length-prefixed frames), and a wait for the n-th.
    const counted = (st: http2.ClientHttp2Stream) => {
      let buf = Buffer.alloc(0)
      let seen = 0
      let waiter: { n: number; resolve: () => void } | undefined
      let closed = false
      st.on('data', (d: Buffer) => {
        buf = Buffer.concat([buf, d])
        while (buf.length >= 5 && buf.length >= 5 + buf.readUInt32BE(1)) {
          buf = buf.subarray(5 + buf.readUInt32BE(1))
          seen++
        }
        if (waiter && seen >= waiter.n) waiter.resolve()
      })
      st.once('close', () => {
        closed = true
        waiter?.resolve()
      })
      return async (n: number) => {
        if (seen < n && !closed) await new Promise<void>((resolve) => (waiter = { n, resolve }))
        if (seen < n) throw new Error(`the stream closed after ${seen} of ${n} answers (rst ${st.rstCode})`)
      }
    }
    const status = frame({ response_headers: { headers: { headers: [{ key: ':status', raw_value: Buffer.from('200') }] }, end_of_stream: false } })
    const last = frame({ response_body: { body: Buffer.from('{}'), end_of_stream: true } })
    let completed = 0
    try {
      const one = async (g: WireGateway, i: number) => {
        const st = g.open()
        const answers = counted(st)
        st.write(chatHeaders())
        st.write(bodyFrame(chatBody(`finished ${i}`)))
        await answers(2) // the destination, the body back
        st.write(status)
        st.write(last)
        await answers(4) // the two response answers
        completed++
        // What Envoy's filter does when its request ends, without the graceful-close flag.
        st.end()
        st.close(CANCEL)
      }
      // More than nghttp2's burst of 1,000 resets, 8 streams at a time.
      for (let i = 0; i < 1_200; i += 8) {
        if (codes.length >= gateways.length) {
          gw = await WireGateway.connect(r.epp.grpcAddress)
          watch(gw)
          gateways.push(gw)
        }
        const g = gw
        await Promise.all(Array.from({ length: 8 }, (_, k) => one(g, i + k)))
      }
      expect(completed).toBe(1_200)
      // Asked to go away (NO_ERROR) before nghttp2's limit, never cut (INTERNAL_ERROR).
      expect(codes.length).toBeGreaterThan(0)
      expect(codes.every((c) => c === http2.constants.NGHTTP2_NO_ERROR)).toBe(true)
      expect(await r.epp.runtime.metricsText()).toMatch(/prefix_router_epp_goaways_total\{reason="stream_resets"\} [1-9]/)
      await settled(r)
    } finally {
      for (const g of gateways) g.close()
    }
  })
})
