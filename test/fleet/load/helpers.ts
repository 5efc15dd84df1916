// A /metrics server of the tests' own, for the ways an instance's scrape can go wrong, and a
// sink that keeps what the scraper hands the router.
import http from 'node:http'
import type { AddressInfo } from 'node:net'
import type { EngineLoadSink } from '../../../src/fleet/load/index.js'

export type Mode = 'ok' | '500' | 'hang' | 'missing' | 'garbage' | 'not_vllm' | '404'

export interface MetricsServer {
  url: string
  mode: Mode
  running: number
  waiting: number
  /** Requests received, and connections open now. */
  requests: number
  open(): number
  /** Requests held open by 'hang', and how many of them the client has given up on. */
  hung: http.ServerResponse[]
  abandoned: number
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
    open: () => sockets.size,
    hung: [],
    abandoned: 0,
    close: async () => undefined,
  }
  const server = http.createServer((req, res) => {
    m.requests++
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
