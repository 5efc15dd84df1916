// Every way an ext_proc stream ends on the wire ends its Exchange in the picker and releases
// its lease: a reset right behind the request headers (in the same write, the next turn, or once
// the picker holds the stream), a reset after the pick and in the middle of the response path,
// the gateway's connection cut under open streams, and a grpc-timeout that runs out.
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
})
