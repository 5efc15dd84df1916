// The picker reads a body's routing key with serve's own code (src/request/request-key.ts): with
// prefix_aware, whose pick depends only on the key and the members, serve and the picker in
// front of the same pods choose the same pod for every body, tenant header included.
import { describe, expect, it } from 'vitest'
import { TENANT_HEADER } from '../../src/core/key/index.js'
import { post, startRouter } from '../proxy/helpers.js'
import { chatBody, startRig, useRigs } from './helpers.js'

useRigs()

describe('epp and serve', () => {
  it('pick the same pod for the same body', async () => {
    const r = await startRig(4)
    const serve = await startRouter(r.fleet.urls)
    try {
      for (let d = 0; d < 12; d++) {
        const body = chatBody(`conversation ${d}: ${'some shared context. '.repeat(30 + d)}`)
        const headers = d % 3 === 0 ? { [TENANT_HEADER]: `tenant-${d}` } : {}
        const viaServe = await post(`${serve.url}/v1/chat/completions`, body, { 'content-type': 'application/json', ...headers })
        expect(viaServe.status).toBe(200)
        const instance = viaServe.headers.get('x-prefix-router-instance')!
        const viaEpp = await r.gw.chat({ body, headers })
        expect(viaEpp.header).toBe(new URL(instance).host)
      }
    } finally {
      await serve.close()
    }
  })
})
