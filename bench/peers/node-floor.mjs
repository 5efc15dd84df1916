// The floor for a proxy written on Node's HTTP stack, for bench/proxy.bench.ts: Node's HTTP/1.1
// server in front of an undici Pool, forwarding each request as it is, with none of the
// router's work (no routing key, no pick, no header filtering, no metrics, no logs). What the
// router adds above this row is ours; what this row adds above the direct path is Node's.
// Usage: node bench/peers/node-floor.mjs UPSTREAM_URL; prints "listening <port>".
import http from 'node:http'
import { Pool } from 'undici'

const pool = new Pool(process.argv[2], { connections: 128 })

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
server.listen(0, '127.0.0.1', () => console.log(`listening ${server.address().port}`))
process.on('SIGTERM', () => process.exit(0))
