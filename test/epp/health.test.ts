// grpc.health.v1 on the picker's port: liveness always, readiness and the ext_proc service
// only with a ready instance and while not draining.
import { describe, expect, it } from 'vitest'
import { until } from '../proxy/helpers.js'
import { chatBody, startRig, useRigs } from './helpers.js'

useRigs()

describe('epp health', () => {
  it('SERVING for "", liveness, readiness and the ext_proc service with a ready instance', async () => {
    const r = await startRig(1)
    for (const s of ['', 'liveness', 'readiness', 'envoy.service.ext_proc.v3.ExternalProcessor']) expect(await r.gw.health(s)).toBe('SERVING')
    // Unknown services: NOT_FOUND (gRPC code 5), as the health-checking protocol says.
    expect(await r.gw.health('something.else')).toBe('error 5')
  })

  it('readiness NOT_SERVING with no ready instance; liveness still SERVING', async () => {
    const r = await startRig(1, 'streamed', {}, ['http://127.0.0.1:1'])
    expect(await r.gw.health('liveness')).toBe('SERVING')
    expect(await r.gw.health('readiness')).toBe('NOT_SERVING')
    expect(await r.gw.health('envoy.service.ext_proc.v3.ExternalProcessor')).toBe('NOT_SERVING')
  })

  it('draining: readiness turns NOT_SERVING at once, Watch reports it, requests are still picked for during the delay, then the port closes', async () => {
    const r = await startRig(1)
    const w = r.gw.watch('readiness')
    await until(() => w.statuses.length === 1, 5000, 'the first Watch status')
    expect(w.statuses).toEqual(['SERVING'])
    const done = r.epp.shutdown({ delayMs: 3000, timeoutMs: 1000 })
    expect(await r.gw.health('readiness')).toBe('NOT_SERVING')
    expect(await r.gw.health('liveness')).toBe('SERVING')
    const late = await r.gw.chat({ body: chatBody('during the drain delay') })
    expect(late.status).toBe(200)
    await until(() => w.statuses.length === 2, 5000, 'Watch reporting NOT_SERVING')
    expect(w.statuses).toEqual(['SERVING', 'NOT_SERVING'])
    await done
    // The port is closed: a new stream fails rather than being picked for.
    const after = await r.gw.chat({ body: chatBody('after') })
    expect(after.header).toBeUndefined()
    expect(after.stream.error).toBeDefined()
    w.cancel()
  })
})
