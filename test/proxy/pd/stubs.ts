// Prefill and decode instances on loopback for the disaggregation tests, answering as vLLM's
// NixlConnector does (a prefill instance's kv_transfer_params; a decode instance counting every
// received token as cached), with faults to order: refused connections, error statuses,
// answers without or with broken parameters, held answers.
import http from 'node:http'
import type { AddressInfo } from 'node:net'

export interface Seen {
  url: string
  body: Record<string, unknown>
  headers: http.IncomingHttpHeaders
}

export type PrefillMode = 'ok' | 'no_params' | 'malformed' | 'stream' | 'status' | 'hold' | 'refuse' | 'refuse_params'

export interface PdStub {
  url: string
  name: string
  seen: Seen[]
  /** What the next answers do (prefill stubs). */
  mode: PrefillMode
  status: number
  /** Requests whose answer is held (mode hold), and whether the client side closed them. */
  held: http.ServerResponse[]
  closedEarly: number
  /** Cached tokens a prefill answer reports. */
  cached: number
  close(): Promise<void>
}

const PROMPT_TOKENS = 1000

async function listen(name: string, handle: (stub: PdStub, req: http.IncomingMessage, res: http.ServerResponse, body: Record<string, unknown>) => void): Promise<PdStub> {
  const stub: PdStub = { url: '', name, seen: [], mode: 'ok', status: 503, held: [], closedEarly: 0, cached: 32, close: async () => undefined }
  const server = http.createServer((req, res) => {
    const chunks: Buffer[] = []
    req.on('data', (c: Buffer) => chunks.push(c))
    req.on('end', () => {
      if (req.url === '/health') return void res.writeHead(200).end()
      if (req.url === '/v1/models') return void res.writeHead(404).end()
      const text = Buffer.concat(chunks).toString()
      const body = text === '' ? {} : (JSON.parse(text) as Record<string, unknown>)
      stub.seen.push({ url: req.url ?? '', body, headers: req.headers })
      res.on('close', () => {
        if (!res.writableFinished) stub.closedEarly++
      })
      handle(stub, req, res, body)
    })
  })
  await new Promise<void>((r) => server.listen(0, '127.0.0.1', r))
  stub.url = `http://127.0.0.1:${(server.address() as AddressInfo).port}`
  stub.close = () =>
    new Promise<void>((r) => {
      server.closeAllConnections()
      server.close(() => r())
    })
  return stub
}

let nextRequest = 0

/** A prefill instance: one token, and the parameters of its held blocks. */
export function prefillStub(name: string): Promise<PdStub> {
  return listen(name, (stub, req, res, body) => {
    const mode = stub.mode
    if (mode === 'refuse') return void req.socket.destroy()
    if (mode === 'hold') return void stub.held.push(res)
    if (mode === 'status') return void res.writeHead(stub.status, { 'content-type': 'application/json' }).end(JSON.stringify({ error: { message: `prefill says ${stub.status}`, type: 'x', code: stub.status } }))
    if (mode === 'stream') {
      res.writeHead(200, { 'content-type': 'text/event-stream' })
      return void res.end('data: {"choices":[]}\n\ndata: [DONE]\n\n')
    }
    const id = `${name}-req-${nextRequest++}`
    const params =
      mode === 'no_params'
        ? null
        : {
            do_remote_prefill: true,
            do_remote_decode: false,
            remote_block_ids: [[1, 2, 3]],
            remote_engine_id: mode === 'malformed' ? 42 : `engine-${name}`,
            remote_request_id: id,
            remote_host: '127.0.0.1',
            remote_port: 5600,
            tp_size: 1,
            remote_num_tokens: PROMPT_TOKENS,
            remote_blocks_expiry_time: null,
          }
    res.writeHead(200, { 'content-type': 'application/json' })
    res.end(
      JSON.stringify({
        id,
        object: 'chat.completion',
        model: body.model,
        choices: [{ index: 0, message: { role: 'assistant', content: 'x' }, finish_reason: 'length' }],
        usage: { prompt_tokens: PROMPT_TOKENS, completion_tokens: 1, total_tokens: PROMPT_TOKENS + 1, prompt_tokens_details: { cached_tokens: stub.cached } },
        kv_transfer_params: params,
      }),
    )
  })
}

/** A decode instance: a streamed or whole answer, reporting what it received as cached, as vLLM's decode does. */
export function decodeStub(name: string): Promise<PdStub> {
  return listen(name, (stub, req, res, body) => {
    if (stub.mode === 'refuse') return void req.socket.destroy()
    if (stub.mode === 'hold') return void stub.held.push(res)
    if (stub.mode === 'status') return void res.writeHead(stub.status, { 'content-type': 'application/json' }).end(JSON.stringify({ error: { message: `decode says ${stub.status}`, type: 'x', code: stub.status } }))
    // An instance that will not take KV parameters (no connector that reads them): 400 to any request carrying them.
    if (stub.mode === 'refuse_params' && body.kv_transfer_params !== undefined) return void res.writeHead(400, { 'content-type': 'application/json' }).end(JSON.stringify({ error: { message: 'unknown field kv_transfer_params', type: 'BadRequestError', code: 400 } }))
    const remote = (body.kv_transfer_params as { do_remote_prefill?: boolean } | undefined)?.do_remote_prefill === true
    const usage = { prompt_tokens: PROMPT_TOKENS, completion_tokens: 3, total_tokens: PROMPT_TOKENS + 3, prompt_tokens_details: { cached_tokens: remote ? PROMPT_TOKENS - 1 : 0 } }
    res.setHeader('x-decoded-by', name)
    if (body.stream === true) {
      res.writeHead(200, { 'content-type': 'text/event-stream' })
      for (const t of ['a', 'b', 'c']) res.write(`data: ${JSON.stringify({ choices: [{ index: 0, delta: { content: t }, finish_reason: null }] })}\n\n`)
      res.write(`data: ${JSON.stringify({ choices: [], usage })}\n\n`)
      return void res.end('data: [DONE]\n\n')
    }
    res.writeHead(200, { 'content-type': 'application/json' })
    res.end(JSON.stringify({ id: 'd', object: 'chat.completion', choices: [{ index: 0, message: { role: 'assistant', content: 'abc' }, finish_reason: 'stop' }], usage }))
  })
}

/** A port nothing listens on: a prefill or decode instance that is down. */
export async function deadUrl(): Promise<string> {
  const s = http.createServer()
  await new Promise<void>((r) => s.listen(0, '127.0.0.1', r))
  const port = (s.address() as AddressInfo).port
  await new Promise<void>((r) => s.close(() => r()))
  return `http://127.0.0.1:${port}`
}
