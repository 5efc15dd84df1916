// A /metrics server of the tests' own, for the ways an instance's scrape can go wrong, and a
// sink that keeps what the scraper hands the router.
import http from 'node:http'
import type { AddressInfo } from 'node:net'
import { openAIRequest } from '../../../src/core/key/openai-key.js'
import { Router } from '../../../src/core/router.js'
import type { EngineLoadSink } from '../../../src/fleet/load/index.js'

export const MODEL = 'sim-tiny'

/** A chat request for the simulator's tiny model. */
export const chatBody = (content: string, maxTokens: number, stream = false) => JSON.stringify({ model: MODEL, max_tokens: maxTokens, stream, messages: [{ role: 'user', content }] })

/** `n` prompts whose home on the ring (a dry run of `strategy` with the same instances, hash placement) is `home`. */
export function homedAt(urls: string[], home: string, n: number, strategy: string, tag: string): string[] {
  const dry = new Router({ instances: urls.map((id) => ({ id })), strategy, placement: 'hash' })
  const out: string[] = []
  for (let d = 0; out.length < n && d < 100_000; d++) {
    const content = `${tag} document ${d}: ${'a paragraph of its own text. '.repeat(10)}${d}`
    const { text, anchor } = openAIRequest('chat', Buffer.from(chatBody(content, 1)), 65_536)
    const lease = dry.pick(text, anchor === undefined ? {} : { anchor })
    lease.release()
    if (lease.instance === home) out.push(content)
  }
  dry.close()
  return out
}

/**
 * Opens `n` streaming chats straight to a simulated worker, past any router (as another
 * replica's or client's would be), that do not end by themselves; `held` gets their aborts.
 * Each answer is kept referenced in its entry: undici cancels the unread body of a Response
 * that is garbage collected, which would end that request in the engine mid-test.
 */
export async function direct(url: string, n: number, held: Held[]): Promise<void> {
  for (let i = 0; i < n; i++) {
    const ac = new AbortController()
    const entry: Held = { abort: () => ac.abort() }
    held.push(entry)
    const res = await fetch(`${url}/v1/chat/completions`, { method: 'POST', signal: ac.signal, headers: { 'content-type': 'application/json' }, body: chatBody(`another client's request ${i}`, 20_000, true) })
    entry.answer = res
    if (res.status !== 200) throw new Error(`the worker answered ${res.status}`)
  }
}

/** A request held open, and its answer while it streams (kept so that it is not collected). */
export interface Held {
  abort(): void
  answer?: Response
}

/** Sends each prompt to `base`, one after another; the instances that answered (debug headers). */
export async function route(base: string, contents: string[]): Promise<string[]> {
  const out: string[] = []
  for (const c of contents) {
    const res = await fetch(`${base}/v1/chat/completions`, { method: 'POST', headers: { 'content-type': 'application/json' }, body: chatBody(c, 1) })
    await res.text()
    if (res.status !== 200) throw new Error(`the router answered ${res.status}`)
    out.push(res.headers.get('x-prefix-router-instance')!)
  }
  return out
}

export type Mode = 'ok' | '500' | 'hang' | 'missing' | 'garbage' | 'not_vllm' | '404' | 'slow-tail' | 'huge'

export interface MetricsServer {
  url: string
  mode: Mode
  running: number
  waiting: number
  /** Requests received (any path, and GET /metrics alone), and connections open now. */
  requests: number
  metricsRequests: number
  open(): number
  /** Requests held open by 'hang', and how many of them the client has given up on. */
  hung: http.ServerResponse[]
  abandoned: number
  /** 'huge': the bytes of filler after the gauges, and what each answer got written before its connection closed. */
  hugeBytes: number
  written: number[]
  close(): Promise<void>
}

export async function metricsServer(mode: Mode = 'ok'): Promise<MetricsServer> {
  const sockets = new Set<import('node:net').Socket>()
  const m: MetricsServer = {
    url: '',
    mode,
    running: 0,
    waiting: 0,
    requests: 0,
    metricsRequests: 0,
    open: () => sockets.size,
    hung: [],
    abandoned: 0,
    hugeBytes: 50 << 20,
    written: [],
    close: async () => undefined,
  }
  const server = http.createServer((req, res) => {
    m.requests++
    if (req.url === '/metrics') m.metricsRequests++
    switch (m.mode) {
      case 'ok':
        res.writeHead(200, { 'content-type': 'text/plain' })
        return res.end(`# HELP vllm:num_requests_running x\nvllm:num_requests_running{engine="0"} ${m.running}.0\nvllm:num_requests_waiting{engine="0"} ${m.waiting}.0\nvllm:kv_cache_usage_perc{engine="0"} 0.5\n`)
      case '500':
        res.writeHead(500)
        return res.end('engine fell over')
      case 'hang':
        m.hung.push(res)
        req.socket.once('close', () => m.abandoned++)
        return
      case 'missing':
        res.writeHead(200)
        return res.end('vllm:num_requests_running{engine="0"} 1.0\n')
      case 'garbage':
        res.writeHead(200)
        return res.end('vllm:num_requests_running{engine="0"} lots\nvllm:num_requests_waiting 1\n')
      case 'slow-tail':
        // The gauges at once, then the rest of the page never comes.
        res.writeHead(200, { 'content-type': 'text/plain' })
        res.write(`vllm:num_requests_running{engine="0"} ${m.running}.0\nvllm:num_requests_waiting{engine="0"} ${m.waiting}.0\nvllm:kv_cache_usage_perc{engine="0"} 0.5\nvllm:prefix_cache_hits_total 1.0\n`)
        m.hung.push(res)
        req.socket.once('close', () => m.abandoned++)
        return
      case 'huge': {
        // The gauges at the top, then filler lines to hugeBytes, written as the client takes them.
        res.writeHead(200, { 'content-type': 'text/plain' })
        let sent = 0
        const filler = Buffer.from('# filler line of a very long page\n'.repeat(2048))
        const pump = () => {
          while (sent < m.hugeBytes && !res.destroyed) {
            sent += filler.length
            if (!res.write(filler)) return void res.once('drain', pump)
          }
          if (!res.destroyed) res.end()
        }
        res.once('close', () => m.written.push(sent))
        res.write(`vllm:num_requests_running{engine="0"} ${m.running}.0\nvllm:num_requests_waiting{engine="0"} ${m.waiting}.0\nvllm:kv_cache_usage_perc{engine="0"} 0.5\n`)
        return pump()
      }
      case '404':
        res.writeHead(404)
        return res.end('no such page')
      case 'not_vllm':
        res.writeHead(200)
        return res.end('# a server that is not vLLM\nhttp_requests_total 5\n')
    }
  })
  server.on('connection', (s) => {
    sockets.add(s)
    s.once('close', () => sockets.delete(s))
  })
  await new Promise<void>((r) => server.listen(0, '127.0.0.1', r))
  m.url = `http://127.0.0.1:${(server.address() as AddressInfo).port}`
  m.close = () =>
    new Promise<void>((r) => {
      server.closeAllConnections()
      server.close(() => r())
    })
  return m
}

/** A sink keeping the external figures, with own in-flight counts the test sets. */
export class FakeSink implements EngineLoadSink {
  readonly external = new Map<string, number>()
  readonly own = new Map<string, number>()
  setEngineLoad(id: string, inFlight: number, prefill: number): boolean {
    if (prefill !== 0) throw new Error(`prefill ${prefill}: the engines report none`)
    // The router's own bounds on the figure (Router.setEngineLoad throws outside them).
    if (!Number.isInteger(inFlight) || inFlight < 0 || inFlight > 0xffffffff) throw new RangeError(`inFlight must be an integer from 0 to 4294967295; got ${inFlight}`)
    this.external.set(id, inFlight)
    return true
  }
  inFlight(id: string): number {
    return this.own.get(id) ?? 0
  }
}

/** Timers the process has active (node's own list), to see that none is left behind. */
export function activeTimers(): number {
  return process.getActiveResourcesInfo().filter((r) => r === 'Timeout').length
}

/**
 * Runs `fn` with unref() doing nothing, so that the timers it starts (the scraper's are
 * unref'd) show in activeTimers().
 */
export async function withRefTimers<T>(fn: () => Promise<T>): Promise<T> {
  const t = setTimeout(() => undefined, 0)
  const proto = Object.getPrototypeOf(t) as { unref(): unknown }
  clearTimeout(t)
  const unref = proto.unref
  proto.unref = function (this: unknown) {
    return this
  }
  try {
    return await fn()
  } finally {
    proto.unref = unref
  }
}
