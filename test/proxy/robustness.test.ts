// Arbitrary requests at the front door: every one gets an HTTP answer, the process stays up,
// nothing is left in flight. And what the logs say, and do not say, about prompts.
import net from 'node:net'
import { Writable } from 'node:stream'
import fc from 'fast-check'
import { pino } from 'pino'
import { describe, expect, it } from 'vitest'
import { parseConfig } from '../../src/config/config.js'
import { ProxyServer } from '../../src/proxy/proxy.js'
import { chat, post, startRouter, startStub, totalInFlight, until } from './helpers.js'

describe('arbitrary requests', () => {
  it('random methods, paths, headers and bodies always get a status line; counters return to 0', async () => {
    const stub = await startStub('fuzz')
    const router = await startRouter([stub.url], { limits: { maxBodyBytes: 8192, headersTimeoutMs: 2000 } })
    const paths = fc.constantFrom('/v1/chat/completions', '/v1/completions', '/invocations', '/v1/models', '/endpoints/default/invocations', '/endpoints/%zz/invocations', '/endpoints/x/openai/v1/chat/completions', '/ping', '/health', '/%zz', '/v1/chat/completions?x=%ff')
    const bodies = fc.oneof(
      fc.json().map((j) => Buffer.from(j)),
      fc.uint8Array({ maxLength: 10_000 }).map((b) => Buffer.from(b)),
      fc.record({ model: fc.option(fc.string()), messages: fc.array(fc.record({ role: fc.string(), content: fc.oneof(fc.string(), fc.array(fc.anything())) }), { maxLength: 3 }), prompt_cache_key: fc.option(fc.string({ maxLength: 80 })) }).map((o) => Buffer.from(JSON.stringify(o))),
    )
    try {
      await fc.assert(
        fc.asyncProperty(fc.constantFrom('GET', 'POST', 'PUT', 'DELETE'), paths, bodies, fc.option(fc.string({ maxLength: 80 })), async (method, path, body, tenant) => {
          const headers: Record<string, string> = { 'content-type': 'application/json' }
          if (tenant !== null) headers['x-amzn-sagemaker-prefix-aware-id'] = Buffer.from(tenant, 'utf8').toString('latin1').replace(/[\r\n]/g, '')
          const res = await fetch(`${router.url}${path}`, { method, headers, ...(method === 'GET' ? {} : { body }) }).catch((e: Error) => e)
          if (res instanceof Error) throw res
          expect(res.status).toBeGreaterThanOrEqual(200)
          expect(res.status).toBeLessThan(600)
          const text = await res.text()
          if (res.status >= 400 && res.status !== 405 && text.length > 0) expect(JSON.parse(text)).toHaveProperty('error.message')
        }),
        { numRuns: 250 },
      )
      // Garbage that is not HTTP at all.
      for (const junk of ['\x00\x01\x02\r\n\r\n', 'GET / HTTP/9.9\r\n\r\n', 'PRI * HTTP/2.0\r\n\r\nSM\r\n\r\ngarbage-frames', 'POST /v1/completions HTTP/1.1\r\nContent-Length: -5\r\n\r\n']) {
        await new Promise<void>((resolve) => {
          const s = net.connect(Number(new URL(router.url).port), '127.0.0.1', () => s.end(junk))
          s.on('error', () => resolve())
          s.on('close', () => resolve())
          s.resume()
        })
      }
      expect((await post(`${router.url}/v1/chat/completions`, chat('still up'))).status).toBe(200)
      await until(() => totalInFlight(router) === 0, 3000, 'in-flight back to 0')
    } finally {
      await router.close()
      await stub.close()
    }
  }, 60_000)
})

describe('logs', () => {
  async function logsOf(prompts: boolean): Promise<string> {
    const stub = await startStub('log')
    let text = ''
    const sink = new Writable({
      write(chunk: Buffer, _enc, cb) {
        text += chunk.toString()
        cb()
      },
    })
    const config = parseConfig({
      listen: { host: '127.0.0.1', port: 0 },
      admin: { host: '127.0.0.1', port: 0 },
      log: { level: 'info', prompts },
      health: { intervalMs: 0 },
      discovery: { modelsIntervalMs: 0, metricsIntervalMs: 0 },
      endpoints: [{ name: 'default', instances: [stub.url] }],
    })
    const router = await ProxyServer.start(config, { logger: pino({ level: 'info' }, sink) })
    await post(`${router.url}/v1/chat/completions`, chat('TOP-SECRET-PROMPT-TEXT'))
    await router.close()
    await stub.close()
    return text
  }

  it('logs each request as JSON, and never the prompt unless asked', async () => {
    const quiet = await logsOf(false)
    const line = quiet.trim().split('\n').map((l) => JSON.parse(l) as Record<string, unknown>).find((l) => l.msg === 'request')
    expect(line).toMatchObject({ method: 'POST', path: '/v1/chat/completions', status: 200, endpoint: 'default' })
    expect(quiet).not.toContain('TOP-SECRET-PROMPT-TEXT')
    expect(await logsOf(true)).toContain('TOP-SECRET-PROMPT-TEXT')
  })
})
