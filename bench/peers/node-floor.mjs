// The floor for a proxy written on Node's HTTP stack, for bench/proxy.bench.ts: Node's HTTP/1.1
// server in front of an undici Pool, forwarding each request as it is, with none of the
// router's work (no routing key, no pick, no header filtering, no metrics, no logs). What the
// router adds above this row is ours; what this row adds above the direct path is Node's.
// With WORKERS > 1 it runs as node:cluster workers sharing the port, the way a multi-process
// router would, so that it is compared with the router at the same process count.
// Usage: node bench/peers/node-floor.mjs UPSTREAM_URL [WORKERS]; prints "listening <port>" once every worker listens.
import cluster from 'node:cluster'
import http from 'node:http'
import { Pool } from 'undici'

const upstream = process.argv[2]
const workers = Number(process.argv[3] ?? 1)

function serve() {
  const pool = new Pool(upstream, { connections: 128 })
  const server = http.createServer({ noDelay: true, keepAliveTimeout: 60_000 }, (req, res) => {
    const chunks = []
    req.on('data', (c) => chunks.push(c))
    req.on('end', () => {
      pool.dispatch(
        { path: req.url, method: req.method, headers: { 'content-type': req.headers['content-type'] ?? 'application/json' }, body: Buffer.concat(chunks) },
        {
          onRequestStart() {},
          onResponseStart(_c, status, headers) {
            res.writeHead(status, { 'content-type': headers['content-type'] })
          },
          onResponseData(_c, chunk) {
            res.write(chunk)
          },
          onResponseEnd() {
            res.end()
          },
          onResponseError(_c, err) {
            res.destroy(err)
          },
        },
      )
    })
  })
  server.listen(0, '127.0.0.1', () => {
    if (cluster.isWorker) process.send({ listening: server.address().port })
    else console.log(`listening ${server.address().port}`)
  })
}

if (workers <= 1) serve()
else if (cluster.isPrimary) {
  // Workers listening on port 0 share one port the primary picks, and it hands out connections
  // round-robin (Node's default on Linux), as a multi-process router would.
  let ready = 0
  for (let i = 0; i < workers; i++) {
    cluster.fork().on('message', (m) => {
      if (++ready === workers) console.log(`listening ${m.listening}`)
    })
  }
} else serve()

process.on('SIGTERM', () => {
  if (cluster.isPrimary) for (const w of Object.values(cluster.workers ?? {})) w?.kill('SIGTERM')
  process.exit(0)
})
