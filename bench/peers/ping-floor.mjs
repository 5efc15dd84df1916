// The machine's own noise for bench/hostile-peers.bench.ts: a bare node:http server answering
// GET /ping, probed beside the router under attack at the same instants. Its longest wait is
// what the machine's scheduler (two cores shared with other work) gives any Node process; the
// router's above it is the attack's.
// Usage: node bench/peers/ping-floor.mjs; prints "listening <port>".
import http from 'node:http'

const server = http.createServer((_req, res) => res.writeHead(200, { 'content-type': 'text/plain' }).end('pong'))
server.listen(0, '127.0.0.1', () => console.log(`listening ${server.address().port}`))
