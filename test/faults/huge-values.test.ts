// Values a client chooses that the router repeats in its answers and its log: a model name of
// megabytes was echoed whole in the 404 and in the access-log line. A model longer than any
// model name is refused; whatever is repeated is a short prefix and its length.
import { Writable } from 'node:stream'
import { pino } from 'pino'
import { afterEach, describe, expect, it } from 'vitest'
import { ProxyServer } from '../../src/proxy/proxy.js'
import { MAX_MODEL_CHARS } from '../../src/core/echo.js'
import { startSimFleet, type SimFleet } from '../../src/sim/index.js'
import { closeRouter, testConfig, until } from '../proxy/helpers.js'
import { MODEL } from './front-helpers.js'

let fleet: SimFleet | undefined
let router: ProxyServer | undefined
afterEach(async () => {
  await closeRouter(router, 5000)
  await fleet?.close()
  router = fleet = undefined
})

/** A router in front of the simulator whose log lines are kept as written (raw text). */
async function start(): Promise<{ url: string; lines: string[] }> {
  const lines: string[] = []
  const sink = new Writable({
    write(chunk: Buffer, _enc, cb) {
      for (const l of chunk.toString().split('\n')) if (l.trim()) lines.push(l)
      cb()
    },
  })
  fleet = await startSimFleet({ instances: 1, profile: 'tiny' })
  // Models discovered at start, so that an unknown one is refused with model_not_found.
  router = await ProxyServer.start(testConfig([{ name: 'default', instances: fleet.urls }], { discovery: { modelsIntervalMs: 60_000, metricsIntervalMs: 0 } }), { logger: pino({ level: 'info' }, sink) })
  await until(async () => (await fetch(`${router!.url}/v1/models`).then((r) => r.json() as Promise<{ data: unknown[] }>)).data.length > 0, 10_000, 'models discovered')
  return { url: router.url, lines }
}

async function post(url: string, body: string) {
  const r = await fetch(url, { method: 'POST', body, headers: { 'content-type': 'application/json' } })
  return { status: r.status, text: await r.text() }
}

const chat = (model: string) => JSON.stringify({ model, messages: [{ role: 'user', content: 'hi' }], max_tokens: 1 })
/** The access-log lines of POSTs (start() itself sent a GET). */
const requestLines = (lines: string[]) => lines.filter((l) => l.includes('"msg":"request"') && l.includes('"method":"POST"'))
const error = (text: string) => (JSON.parse(text) as { error: { code: string; message: string; type: string } }).error

describe('a client-chosen value the router repeats', () => {
  it('a 15 MiB model is refused with 400 model_too_long; the answer and the log line stay short', async () => {
    const { url, lines } = await start()
    const model = 'm'.repeat(15 * 1024 * 1024)
    const res = await post(`${url}/v1/chat/completions`, chat(model))
    expect(res.status).toBe(400)
    expect(error(res.text)).toMatchObject({ code: 'model_too_long', type: 'invalid_request_error' })
    expect(error(res.text).message).toContain(String(MAX_MODEL_CHARS))
    expect(res.text.length).toBeLessThan(1024)
    await until(() => requestLines(lines).length === 1, 5000, 'the access-log line')
    expect(requestLines(lines)[0]!.length).toBeLessThan(1024)
    expect(Math.max(...lines.map((l) => l.length))).toBeLessThan(2048)
  })

  it('a model at the limit, unknown, gets 404 model_not_found naming its start and its length', async () => {
    const { url, lines } = await start()
    const model = 'x'.repeat(MAX_MODEL_CHARS - 3) + 'ZZZ'
    const res = await post(`${url}/v1/chat/completions`, chat(model))
    expect(res.status).toBe(404)
    const e = error(res.text)
    expect(e.code).toBe('model_not_found')
    expect(e.message).toContain('xxxxxxxx')
    expect(e.message).toContain(String(MAX_MODEL_CHARS))
    expect(e.message).not.toContain('ZZZ')
    expect(res.text.length).toBeLessThan(512)
    await until(() => requestLines(lines).length === 1, 5000, 'the access-log line')
    expect(requestLines(lines)[0]!.length).toBeLessThan(512)
    expect(requestLines(lines)[0]).toContain(String(MAX_MODEL_CHARS))
  })

  it('a known model is still routed and logged whole', async () => {
    const { url, lines } = await start()
    expect((await post(`${url}/v1/chat/completions`, chat(MODEL))).status).toBe(200)
    await until(() => requestLines(lines).length === 1, 5000, 'the access-log line')
    expect(JSON.parse(requestLines(lines)[0]!)).toMatchObject({ model: MODEL, status: 200 })
  })

  it('a long endpoint name and a long unknown path are repeated as a prefix and a length', async () => {
    const { url } = await start()
    const name = 'e'.repeat(8000)
    const ep = await post(`${url}/endpoints/${name}/openai/v1/chat/completions`, chat(MODEL))
    expect(ep.status).toBe(404)
    expect(error(ep.text).code).toBe('endpoint_not_found')
    expect(error(ep.text).message).toContain('8000')
    expect(ep.text.length).toBeLessThan(512)
    const path = await post(`${url}/${'p'.repeat(8000)}`, chat(MODEL))
    expect(path.status).toBe(404)
    expect(error(path.text).code).toBe('not_found')
    expect(path.text.length).toBeLessThan(512)
    const v1 = await post(`${url}/v1/${'q'.repeat(8000)}`, chat(MODEL))
    expect(v1.status).toBe(404)
    expect(error(v1.text).code).toBe('unsupported_route')
    expect(v1.text.length).toBeLessThan(1024)
  })
})
