// Disaggregated requests with SGLang's bootstrap flow: both legs at once, one room, and the
// pair tried again with a new room when the prefill leg fails while the decode leg waits.
import http from 'node:http'
import type { AddressInfo } from 'node:net'
import { afterEach, describe, expect, it } from 'vitest'
import { ProxyServer } from '../../../src/proxy/proxy.js'
import { capturedLog } from '../../faults/log-lines.js'
import { chat, post, testConfig, totalInFlight, until } from '../helpers.js'

interface Room {
  prefill?: http.ServerResponse
  decode?: http.ServerResponse
  decodeBody?: Record<string, unknown>
}

/**
 * A tiny SGLang fleet: prefill instances that "push" the KV cache of a room to the decode that
 * joined it, and decode instances that answer once their room's prefill has come. A prefill set
 * to fail answers 503 and pushes nothing, leaving its decode waiting.
 */
class SglangFleet {
  readonly rooms = new Map<number, Room>()
  readonly seen: { role: string; name: string; body: Record<string, unknown> }[] = []
  readonly servers: http.Server[] = []
  failing = new Set<string>()
  decodeAborted = 0

  async start(role: 'prefill' | 'decode', name: string): Promise<string> {
    const server = http.createServer((req, res) => {
      const chunks: Buffer[] = []
      req.on('data', (c: Buffer) => chunks.push(c))
      req.on('end', () => {
        if (req.url === '/health') return void res.writeHead(200).end()
        if (req.url === '/v1/models') return void res.writeHead(404).end()
        const body = JSON.parse(Buffer.concat(chunks).toString()) as Record<string, unknown>
        this.seen.push({ role, name, body })
        const id = body.bootstrap_room as number
        const room = this.rooms.get(id) ?? {}
        this.rooms.set(id, room)
        if (role === 'prefill') {
          if (this.failing.has(name)) return void res.writeHead(503, { 'content-type': 'application/json' }).end('{"error":{"message":"prefill down"}}')
          res.writeHead(200, { 'content-type': 'application/json' }).end('{"prefill":"done"}')
          room.prefill = res
        } else {
          room.decode = res
          room.decodeBody = body
          res.on('close', () => {
            if (!res.writableFinished) this.decodeAborted++
          })
        }
        this.settle(id)
      })
    })
    await new Promise<void>((r) => server.listen(0, '127.0.0.1', r))
    this.servers.push(server)
    return `http://127.0.0.1:${(server.address() as AddressInfo).port}`
  }

  settle(id: number): void {
    const room = this.rooms.get(id)!
    if (room.prefill === undefined || room.decode === undefined || room.decode.writableEnded) return
    room.decode.writeHead(200, { 'content-type': 'application/json' })
    room.decode.end(JSON.stringify({ choices: [{ message: { content: 'answer' } }], usage: { prompt_tokens: 10, completion_tokens: 1, prompt_tokens_details: { cached_tokens: 0 } } }))
  }

  async close(): Promise<void> {
    for (const s of this.servers) s.closeAllConnections()
    await Promise.all(this.servers.map((s) => new Promise<void>((r) => s.close(() => r()))))
  }
}

const ctx = { fleet: undefined as SglangFleet | undefined, router: undefined as ProxyServer | undefined }
afterEach(async () => {
  if (ctx.router) {
    await until(() => totalInFlight(ctx.router!) === 0, 5000, 'in-flight back to 0')
    await ctx.router.close()
  }
  await ctx.fleet?.close()
})

async function start(prefills: string[], decodes: string[]) {
  const f = (ctx.fleet = new SglangFleet())
  const p = await Promise.all(prefills.map((n) => f.start('prefill', n)))
  const d = await Promise.all(decodes.map((n) => f.start('decode', n)))
  const { logger, lines } = capturedLog()
  const instances = [...p.map((url, i) => ({ url, role: 'prefill', bootstrapPort: 9000 + i })), ...d.map((url) => ({ url, role: 'decode' }))]
  ctx.router = await ProxyServer.start(testConfig([{ name: 'default', instances }], { disaggregation: { connector: 'sglang', threshold: 0 } }), { logger })
  return { f, router: ctx.router, p, d, lines }
}

describe("disaggregated serving with SGLang's bootstrap", () => {
  it.each(['/v1/chat/completions', '/v1/completions', '/v1/responses'])('%s: both legs at once, naming the prefill instance and one room', async (path) => {
    const { f, router } = await start(['p0'], ['d0'])
    const body = path === '/v1/chat/completions' ? chat('doc '.repeat(300)) : path === '/v1/completions' ? JSON.stringify({ model: 'm', prompt: 'doc '.repeat(300) }) : JSON.stringify({ model: 'm', input: 'doc '.repeat(300) })
    const r = await post(`${router.url}${path}`, body)
    expect(r.status).toBe(200)
    expect(JSON.parse(r.text).choices[0].message.content).toBe('answer')
    const pre = f.seen.find((s) => s.role === 'prefill')!
    const dec = f.seen.find((s) => s.role === 'decode')!
    expect(pre.body).toMatchObject({ bootstrap_host: '127.0.0.1', bootstrap_port: 9000, stream: false })
    expect(dec.body).toMatchObject({ bootstrap_host: '127.0.0.1', bootstrap_port: 9000 })
    expect(Number.isInteger(pre.body.bootstrap_room)).toBe(true)
    expect(dec.body.bootstrap_room).toBe(pre.body.bootstrap_room)
    expect(dec.body.kv_transfer_params).toBeUndefined()
  })

  it('ends the waiting decode try when the prefill leg fails, and tries the pair again with a new room', async () => {
    const { f, router } = await start(['p0', 'p1'], ['d0', 'd1'])
    // Whichever prefill instance the scheduler picks first fails; the other works.
    const r0 = await post(`${router.url}/v1/chat/completions`, chat('warm '.repeat(300)))
    expect(r0.status).toBe(200)
    const firstPrefill = f.seen.find((s) => s.role === 'prefill')!.name
    f.failing.add(firstPrefill)
    f.seen.length = 0
    const r = await post(`${router.url}/v1/chat/completions`, chat('warm '.repeat(300)))
    expect(r.status).toBe(200)
    const pre = f.seen.filter((s) => s.role === 'prefill')
    const dec = f.seen.filter((s) => s.role === 'decode')
    expect(pre.map((s) => s.name)).toEqual([firstPrefill, firstPrefill === 'p0' ? 'p1' : 'p0'])
    expect(dec).toHaveLength(2)
    expect(dec[1]!.body.bootstrap_room).toBe(pre[1]!.body.bootstrap_room)
    expect(dec[1]!.body.bootstrap_room).not.toBe(pre[0]!.body.bootstrap_room)
    await until(() => f.decodeAborted === 1, 5000, 'the waiting decode aborted')
    expect(await router.metricsText()).toMatch(/prefix_router_pd_prefill_failures_total\{endpoint="default",instance="[^"]+",reason="503"\} 1/)
  })
})
