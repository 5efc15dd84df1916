// grpc.health.v1 on the picker's port: liveness always, readiness and the ext_proc service
// only with a ready instance and while not draining.
import { describe, expect, it } from 'vitest'
import { until } from '../proxy/helpers.js'
import { startRig, useRigs } from './helpers.js'

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

  it('draining: readiness turns NOT_SERVING at once, Watch reports it, then the port closes', async () => {
    const r = await startRig(1)
    const w = r.gw.watch('readiness')
    await until(() => w.statuses.length === 1, 5000, 'the first Watch status')
    expect(w.statuses).toEqual(['SERVING'])
    const done = r.epp.shutdown({ delayMs: 1000, timeoutMs: 1000 })
    expect(await r.gw.health('readiness')).toBe('NOT_SERVING')
    expect(await r.gw.health('liveness')).toBe('SERVING')
    await until(() => w.statuses.length === 2, 5000, 'Watch reporting NOT_SERVING')
    expect(w.statuses).toEqual(['SERVING', 'NOT_SERVING'])
    await done
    w.cancel()
  })
})
