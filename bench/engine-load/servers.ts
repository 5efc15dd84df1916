// The engines' side of bench/engine-load.bench.ts: N loopback HTTP servers (default 16), each
// answering GET /metrics with a body as large as a vLLM server's (vllm-metrics.ts), its
// running and waiting counts moving. Prints "listening <port>,<port>,..." once bound.
import http from 'node:http'
import type { AddressInfo } from 'node:net'
import { vllmMetricsBody } from './vllm-metrics.js'

const n = Number(process.env.ENGINES ?? 16)
const engines = Number(process.env.DP_ENGINES ?? 1)
let bodies = Array.from({ length: n }, () => vllmMetricsBody({ engines }))
let tick = 0
setInterval(() => {
  tick++
  bodies = bodies.map((_, i) => vllmMetricsBody({ engines, running: (tick + i) % 40, waiting: (tick * 7 + i) % 5 }))
}, 500).unref()
const servers = await Promise.all(
  Array.from({ length: n }, async (_, i) => {
    const s = http.createServer({ keepAliveTimeout: 60_000 }, (req, res) => {
      if (req.url !== '/metrics') {
        res.writeHead(req.url === '/health' ? 200 : 404)
        return res.end()
      }
      res.writeHead(200, { 'content-type': 'text/plain; version=0.0.4; charset=utf-8' })
      res.end(bodies[i])
    })
    await new Promise<void>((r) => s.listen(0, '127.0.0.1', r))
    return s
  }),
)
console.log(`listening ${servers.map((s) => (s.address() as AddressInfo).port).join(',')}`)
process.on('SIGTERM', () => process.exit(0))
