// The router for bench/alloc.bench.ts, in a process of its own so that the load generator's
// allocations do not count: a ProxyServer as `serve` runs it (built dist/), in front of the
// stub upstream given, with the access log on or off. Prints "listening <port>".
// Usage: node --import ./bench/alloc/probe.mjs bench/alloc/router.mjs UPSTREAM_URL on|off
import { pino } from 'pino'
import { parseConfig } from '../../dist/config/config.js'
import { batched } from '../../dist/log/logger.js'
import { ProxyServer } from '../../dist/proxy/proxy.js'

const [upstream, accessLog = 'on'] = process.argv.slice(2)
const config = parseConfig({
  listen: { host: '127.0.0.1', port: 0 },
  admin: { host: '127.0.0.1', port: 0 },
  log: { level: 'info', accessLog: accessLog === 'on' },
  endpoints: [{ name: 'default', instances: [upstream] }],
})
// Lines are written (and so built) as in production, batched as serve's logDestination()
// batches them, to a sink that costs no terminal.
const logger = pino({ level: 'info' }, batched('/dev/null'))
const server = await ProxyServer.start(config, { logger })
console.log(`listening ${new URL(server.url).port}`)

process.on('message', async (m) => {
  if (m !== 'decision') return
  // serve's own histogram of the routing decision, for the bench to print beside the bytes.
  const metric = await server.metrics.decision.get()
  process.send({ decision: metric.values })
})
process.on('SIGTERM', () => void server.close().then(() => process.exit(0)))
