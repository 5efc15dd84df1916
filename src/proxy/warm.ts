// Warm-up before the front port opens. A fresh process runs the request path in V8's
// interpreter until enough calls have gone through it to be optimised, and loads modules on
// first use: a replica started under load (a rollout, an autoscaler) queued its first
// seconds of traffic behind that. Here the whole path runs first, for real, on a
// throwaway server of the same class as the live one, built from the live configuration
// but listening on 127.0.0.1:0 and routing to a loopback sink: its own endpoints and native
// routers, its own metrics registry, a logger that discards. Nothing of the live fleet
// (in-flight counters, prefix index, metrics, logs, traces) is touched, and all of it is
// closed before the live port opens.
import http from 'node:http'
import http2 from 'node:http2'
import type { AddressInfo } from 'node:net'
import { Writable } from 'node:stream'
import { context, createContextKey } from '@opentelemetry/api'
import { pino, type Logger } from 'pino'
import { Pool, request } from 'undici'
import { ConfigSchema, type Config } from '../config/config.js'

export interface WarmupResult {
  /** Requests answered by the sink through the throwaway proxy. */
  requests: number
  /** Requests that failed (a warm-up failure never stops the start; the log says so). */
  errors: number
  ms: number
  /** The time bound cut it short. */
  timedOut: boolean
  /** Why the warm-up stopped early, when something other than a request failed. */
  failure?: string
}

/** Requests in flight at once: enough to exercise connection pools and the streaming path concurrently. */
const CONCURRENCY = 32
/** The throwaway server: started by the caller (ProxyServer.start), so that it is the live one's class. */
export interface WarmServer {
  readonly url: string
  readonly adminUrl: string
  close(): Promise<void>
}

export type StartWarmServer = (config: Config, logger: Logger) => Promise<WarmServer>

/** Instances per throwaway endpoint: the ring, the index and the load counters see a real choice. */
const SINK_INSTANCES = 3

// The key OpenTelemetry's SDK reads to make no spans (what @opentelemetry/core's
// suppressTracing sets): an embedding application's tracer exports nothing of the warm-up.
const SUPPRESS_TRACING = createContextKey('OpenTelemetry SDK Context Key SUPPRESS_TRACING')

const SSE_CHUNKS = Array.from({ length: 8 }, (_, i) => `data: ${JSON.stringify({ id: 'warmup', object: 'chat.completion.chunk', choices: [{ index: 0, delta: { content: `t${i}` } }] })}\n\n`)
const JSON_ANSWER = JSON.stringify({ id: 'warmup', object: 'chat.completion', model: 'warmup', choices: [{ index: 0, message: { role: 'assistant', content: 'ok' }, finish_reason: 'stop' }] })

// The probes' answers, so that the throwaway instances are probed into the state live ones are in.
const MODELS = JSON.stringify({ object: 'list', data: [{ id: 'warmup', object: 'model' }] })
const METRICS = 'vllm:prefix_cache_queries_total{model_name="warmup"} 100\nvllm:prefix_cache_hits_total{model_name="warmup"} 50\nvllm:cache_config_info{block_size="16",num_gpu_blocks="1000"} 1\n'

function answerGet(url: string, res: http.ServerResponse): void {
  const [type, body] = url.endsWith('/v1/models') ? ['application/json', MODELS] : url.endsWith('/metrics') ? ['text/plain', METRICS] : ['application/json', '{}']
  res.writeHead(200, { 'content-type': type })
  res.end(body)
}

/** The sink: answers like a vLLM instance at once (JSON, or 8 SSE events when the body asks to stream). */
function sinkHandler(req: http.IncomingMessage | http2.Http2ServerRequest, res: http.ServerResponse | http2.Http2ServerResponse): void {
  // The two response classes share these methods, but not in a form TypeScript can unite.
  const out = res as http.ServerResponse
  if (req.method === 'GET') return void answerGet(req.url ?? '/', out)
  const chunks: Buffer[] = []
  req.on('data', (c: Buffer) => chunks.push(c))
  req.on('end', () => {
    const stream = Buffer.concat(chunks).includes('"stream":true')
    if (!stream) {
      // With its length, as vLLM answers: the router's code then sees the header set it will see live.
      out.writeHead(200, { 'content-type': 'application/json', 'content-length': String(Buffer.byteLength(JSON_ANSWER)) })
      out.end(JSON_ANSWER)
      return
    }
    out.writeHead(200, { 'content-type': 'text/event-stream' })
    for (const c of SSE_CHUNKS) out.write(c)
    out.end('data: [DONE]\n\n')
  })
}

async function listen(server: http.Server | http2.Http2Server): Promise<{ port: number; close(): Promise<void> }> {
  await new Promise<void>((resolve, reject) => server.once('error', reject).listen({ port: 0, host: '127.0.0.1', exclusive: true }, resolve))
  return {
    port: (server.address() as AddressInfo).port,
    close: () =>
      new Promise<void>((resolve) => {
        server.close(() => resolve())
        // Keep-alive connections from the throwaway pools would hold close() open.
        if ('closeAllConnections' in server) server.closeAllConnections()
      }),
  }
}

function startSink(h2c: boolean) {
  return listen(h2c ? http2.createServer(sinkHandler) : http.createServer({ keepAliveTimeout: 60_000 }, sinkHandler))
}

// Representative bodies: several 8 KiB prompts sharing prefixes, JSON and streamed, chat
// and completions, so that key extraction, the ring, the prefix index and both answer paths
// all run.
const PROMPTS = Array.from({ length: 16 }, (_, i) => `System ${i % 4}: you are the assistant of team ${i}. ${'Answer from the policy document that follows, citing its sections. '.repeat(120)}`.slice(0, 7900))

function requestFor(i: number): { path: string; body: string } {
  const stream = i % 2 === 1
  const prompt = PROMPTS[i % PROMPTS.length]!
  if (i % 8 === 6) return { path: '/v1/completions', body: JSON.stringify({ model: 'warmup', prompt: `${prompt} ${i}`, max_tokens: 8, stream }) }
  if (i % 16 === 4) return { path: '/invocations', body: JSON.stringify({ inputs: `${prompt} ${i}`, parameters: { max_new_tokens: 8 } }) }
  const messages = [{ role: 'system', content: prompt }, { role: 'user', content: `question ${i}` }]
  return { path: '/v1/chat/completions', body: JSON.stringify({ model: 'warmup', messages, max_tokens: 8, stream }) }
}

type Send = (path: string, body: string) => Promise<number>

function h1Client(url: string): { send: Send; close(): Promise<void> } {
  const pool = new Pool(url, { connections: CONCURRENCY })
  return {
    async send(path, body) {
      const res = await pool.request({ path, method: 'POST', body, headers: { 'content-type': 'application/json' } })
      await res.body.dump({ limit: Infinity })
      return res.statusCode
    },
    close: () => pool.destroy(),
  }
}

function h2cClient(url: string): { send: Send; close(): Promise<void> } {
  const session = http2.connect(url)
  session.on('error', () => {}) // each stream reports its own failure
  return {
    send: (path, body) =>
      new Promise((resolve, reject) => {
        const s = session.request({ ':method': 'POST', ':path': path, 'content-type': 'application/json' })
        let status = 0
        s.on('response', (h) => (status = Number(h[':status'])))
        s.on('data', () => {})
        s.on('end', () => resolve(status))
        s.on('error', reject)
        s.end(body)
      }),
    close: () => new Promise<void>((resolve) => session.close(() => resolve())),
  }
}

/**
 * The live configuration with everything that reaches outside the process replaced by
 * loopback copies. Parsed again, so that it is the same shape of object as the live one: the
 * optimised code then fits the live server's objects too.
 */
function warmConfig(config: Config, sinkPort: number): Config {
  // The exact view reaches out too (event publishers, a tokenizer): the warm copy routes on the
  // approximate view, whose code the exact one falls back to.
  // So does the sharing of queued prefill (Redis): the warm copy is no replica.
  const { tls: _tls, endpoints, kvEvents: _kvEvents, tokenizer: _tokenizer, shareLoad: _shareLoad, ...rest } = config
  return ConfigSchema.parse({
    ...rest,
    listen: { host: '127.0.0.1', port: 0 },
    admin: { host: '127.0.0.1', port: 0 },
    // TLS upstreams (h2) would need a certificate the sink does not have: their requests take
    // the same forward code over HTTP/1.1 here.
    upstream: { ...config.upstream, protocol: config.upstream.protocol === 'h2c' ? 'h2c' : 'http1' },
    warmup: { ...config.warmup, requests: 0, connections: 0 },
    // The sink is no engine: nothing to read there, and the warm copy's timers stay its own.
    engineLoad: { ...config.engineLoad, mode: 'off' },
    log: { ...config.log, prompts: false },
    endpoints: endpoints.map((ep) => ({
      name: ep.name,
      routing: ep.routing,
      instances: Array.from({ length: SINK_INSTANCES }, (_, i) => `http://127.0.0.1:${sinkPort}/i${i}`),
    })),
  })
}

const discard = () =>
  new Writable({
    write(_chunk, _enc, cb) {
      cb()
    },
  })

/**
 * Sends up to `requests` requests through a throwaway server built from `config` by `start`,
 * for at most `timeoutMs`, and closes it all. Never throws: failed requests are counted in
 * `errors`, and anything else that stops it early is in `failure`.
 */
export async function warmUp(config: Config, requests: number, timeoutMs: number, start: StartWarmServer): Promise<WarmupResult> {
  const t0 = performance.now()
  const deadline = t0 + timeoutMs
  let done = 0
  let errors = 0
  let timedOut = false
  const logger: Logger = pino({ level: config.log.level }, discard())
  let sink: Awaited<ReturnType<typeof startSink>> | undefined
  let server: WarmServer | undefined
  const clients: { send: Send; close(): Promise<void> }[] = []
  let failure: string | undefined
  try {
    sink = await startSink(config.upstream.protocol === 'h2c')
    const cfg = warmConfig(config, sink.port)
    // Started in a context that tells an embedding application's tracer to record nothing:
    // the server's request handlers run in it.
    server = await context.with(context.active().setValue(SUPPRESS_TRACING, true), () => start(cfg, logger))
    const url = server.url
    // Most clients speak HTTP/1.1; one in four requests goes over h2c, whose server code differs.
    clients.push(h1Client(url), h1Client(url), h1Client(url), h2cClient(url))
    const names = cfg.endpoints.map((ep) => ep.name)
    let next = 0
    const worker = async () => {
      for (;;) {
        if (next >= requests) return
        if (performance.now() > deadline) {
          timedOut = true
          return
        }
        const i = next++
        const { path, body } = requestFor(i)
        // Each endpoint's routing parameters (its strategy) get their share.
        const ep = encodeURIComponent(names[i % names.length]!)
        const scoped = i % names.length === 0 ? path : path === '/invocations' ? `/endpoints/${ep}/invocations` : `/endpoints/${ep}/openai${path}`
        try {
          const status = await clients[i % clients.length]!.send(scoped, body)
          if (status === 200) done++
          else errors++
        } catch {
          errors++
        }
      }
    }
    await Promise.all(Array.from({ length: CONCURRENCY }, worker))
    // The admin port's /metrics, rendered from a registry of the live one's shape.
    const m = await request(`${server.adminUrl}/metrics`)
    await m.body.dump({ limit: Infinity })
  } catch (err) {
    failure = (err as Error).message
  } finally {
    await Promise.all(clients.map((c) => c.close().catch(() => undefined)))
    await server?.close()
    await sink?.close()
  }
  return { requests: done, errors, ms: performance.now() - t0, timedOut, ...(failure !== undefined && { failure }) }
}
