// The instance side of bench/hostile-load.bench.ts: one loopback server standing for a vLLM
// instance (GET /health, /v1/models, /metrics, and chats answered at once). Its /metrics is a
// real-sized vLLM page (../engine-load/vllm-metrics.ts) until GET /attack?mib=N, then the load
// gauges followed by N MiB of comment lines and no prefix-cache counters (the probe's worst
// case), written as fast as the reader takes them; GET /attack?mib=0 goes back. Prints
// "listening <port>".
import http from 'node:http'
import type { AddressInfo } from 'node:net'
import { vllmMetricsBody } from '../engine-load/vllm-metrics.js'

const normal = vllmMetricsBody({ model: 'm' })
const head = 'vllm:num_requests_running{model_name="m",engine="0"} 1.0\nvllm:num_requests_waiting{model_name="m",engine="0"} 0.0\nvllm:kv_cache_usage_perc{model_name="m",engine="0"} 0.1\n'
const filler = Buffer.from('# HELP filler_total a page that goes on and on, line after line of it\n'.repeat(1024))
let hugeBytes = 0
/** Bytes of /metrics written into sockets since the last GET /attack (what the router was sent). */
let written = 0

const server = http.createServer({ keepAliveTimeout: 60_000 }, (req, res) => {
  const url = new URL(req.url ?? '/', 'http://x')
  if (url.pathname === '/attack') {
    hugeBytes = Number(url.searchParams.get('mib') ?? 0) * 1024 * 1024
    const was = written
    written = 0
    res.writeHead(200, { 'content-type': 'application/json' })
    return res.end(JSON.stringify({ metricsBytesWritten: was }))
  }
  if (url.pathname === '/health') return res.writeHead(200).end()
  if (url.pathname === '/v1/models') {
    res.writeHead(200, { 'content-type': 'application/json' })
    return res.end(JSON.stringify({ object: 'list', data: [{ id: 'm', object: 'model' }] }))
  }
  if (url.pathname === '/metrics') {
    res.writeHead(200, { 'content-type': 'text/plain; version=0.0.4; charset=utf-8' })
    if (hugeBytes === 0) {
      written += normal.length
      return res.end(normal)
    }
    let sent = 0
    const size = hugeBytes
    res.write(head)
    const pump = () => {
      while (sent < size && !res.destroyed) {
        sent += filler.length
        written += filler.length
        if (!res.write(filler)) return void res.once('drain', pump)
      }
      if (!res.destroyed) res.end()
    }
    return pump()
  }
  req.resume()
  req.once('end', () => {
    res.writeHead(200, { 'content-type': 'application/json' })
    res.end('{"id":"x","object":"chat.completion","choices":[{"index":0,"message":{"role":"assistant","content":"ok"},"finish_reason":"stop"}],"usage":{"prompt_tokens":1,"completion_tokens":1,"total_tokens":2}}')
  })
})
server.listen(0, '127.0.0.1', () => console.log(`listening ${(server.address() as AddressInfo).port}`))
