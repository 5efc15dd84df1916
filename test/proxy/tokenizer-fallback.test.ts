// The exact view's tokenizer, seen by an operator: an instance whose /tokenize answers more ids
// than the request can have is refused, the request routed on the approximate view, and the
// fallback shown in /admin/instances (in words) and in the metrics (by reason).
import net from 'node:net'
import { afterEach, describe, expect, it } from 'vitest'
import type { ProxyServer } from '../../src/proxy/proxy.js'
import { maxTokenIds } from '../../src/tokens/tokenize-answer.js'
import { chat, closeRouter, post, startRouter, startStub, type Stub } from './helpers.js'

let router: ProxyServer | undefined
let stub: Stub | undefined
afterEach(async () => {
  await closeRouter(router)
  await stub?.close()
  router = stub = undefined
})

/** A port nothing listens on: the instance's KV-event publisher, never reached. */
async function deadPort(): Promise<number> {
  const s = net.createServer()
  await new Promise<void>((r) => s.listen(0, '127.0.0.1', r))
  const port = (s.address() as net.AddressInfo).port
  await new Promise((r) => s.close(r))
  return port
}

describe('a /tokenize answer past the bound', () => {
  it('routes on the approximate view; /admin/instances says why, the metrics count it', async () => {
    stub = await startStub('i0', (req, res, body) => {
      if (req.url === '/health') return res.writeHead(200).end()
      if (req.url === '/v1/models') return res.writeHead(404).end()
      if (req.url === '/tokenize') {
        // More ids than the request has bytes, by more than any template adds.
        const ids = Array(maxTokenIds(body.length) + 1).fill(7)
        return res.writeHead(200, { 'content-type': 'application/json' }).end(JSON.stringify({ count: ids.length, tokens: ids }))
      }
      res.writeHead(200, { 'content-type': 'application/json' }).end('{"ok":true}')
    })
    const port = await deadPort()
    router = await startRouter([], {
      endpoints: [{ name: 'default', instances: [{ url: stub.url, kvEvents: { endpoint: `tcp://127.0.0.1:${port}` } }] }],
      routing: { strategy: 'longest_prefix' },
      kvEvents: { port: 5557 },
      tokenizer: { mode: 'remote', timeoutMs: 5000 },
    })
    const r = await post(`${router.url}/v1/chat/completions`, chat('count my tokens', { model: 'm' }))
    expect(r.status).toBe(200)
    expect(stub.seen.filter((s) => s.url === '/tokenize')).toHaveLength(1)
    const report = (await (await fetch(`${router.adminUrl}/admin/instances`)).json()) as { endpoints: { tokenizer: Record<string, unknown> | null }[] }
    const t = report.endpoints[0]!.tokenizer!
    expect(t).toMatchObject({ mode: 'remote', requests: 1, failures: 1, timeouts: 0, fallbacks: { too_large: 1 } })
    expect(t.lastFailure).toMatch(new RegExp(`^${stub.url}/tokenize answered more than \\d+ ids`))
    expect(new Date(t.lastFailureAt as string).getTime()).toBeGreaterThan(0)
    expect(await router.metricsText()).toContain('prefix_router_tokenizer_fallbacks_total{mode="remote",reason="too_large"} 1')
  })
})
