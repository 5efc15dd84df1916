// The front door: HTTP/1.1 and HTTP/2 with prior knowledge (h2c) on one port (src/net/h2c-sniff.ts),
// or TLS with ALPN offering h2 and http/1.1.
import { readFileSync } from 'node:fs'
import http from 'node:http'
import http2 from 'node:http2'
import type net from 'node:net'
import type { AddressInfo } from 'node:net'
import type { Config } from '../config.js'
import { h1h2cServer } from '../net/h2c-sniff.js'
import type { Req, Res } from './types.js'

export interface FrontServer {
  readonly address: AddressInfo
  readonly protocol: 'http' | 'https'
  close(): Promise<void>
}

type Handler = (req: Req, res: Res) => void

function h1Options(config: Config): http.ServerOptions {
  const { headersTimeoutMs, requestTimeoutMs } = config.limits
  return {
    headersTimeout: headersTimeoutMs,
    requestTimeout: requestTimeoutMs,
    keepAliveTimeout: 65_000,
    // Node checks both timeouts on this interval (default 30 s): keep it well under them.
    connectionsCheckingInterval: Math.max(50, Math.min(1000, Math.floor(headersTimeoutMs / 4) || 1000)),
  }
}

const h2Settings: http2.Settings = { maxConcurrentStreams: 1000, initialWindowSize: 1 << 20 }

export async function listenFront(config: Config, handler: Handler): Promise<FrontServer> {
  const { host, port } = config.listen
  if (config.tls) {
    const server = http2.createSecureServer(
      { cert: readFileSync(config.tls.cert), key: readFileSync(config.tls.key), allowHTTP1: true, settings: h2Settings, noDelay: true },
      handler as (req: http2.Http2ServerRequest, res: http2.Http2ServerResponse) => void,
    )
    await new Promise<void>((res, rej) => server.once('error', rej).listen(port, host, res))
    return {
      address: server.address() as AddressInfo,
      protocol: 'https',
      close: () => closeAll(server),
    }
  }

  const h1 = http.createServer(h1Options(config), handler as http.RequestListener)
  const h2 = http2.createServer({ settings: h2Settings }, handler as (req: http2.Http2ServerRequest, res: http2.Http2ServerResponse) => void)
  const sessions = new Set<http2.ServerHttp2Session>()
  h2.on('session', (s) => {
    sessions.add(s)
    s.once('close', () => sessions.delete(s))
  })
  const sockets = new Set<net.Socket>()
  const server = h1h2cServer(h1, h2, (socket) => {
    sockets.add(socket)
    socket.once('close', () => sockets.delete(socket))
    socket.on('error', () => socket.destroy())
  })
  await new Promise<void>((res, rej) => server.once('error', rej).listen(port, host, res))
  // The HTTP/1.1 server never listens itself; start its timeout checks as if it did.
  h1.emit('listening')
  return {
    address: server.address() as AddressInfo,
    protocol: 'http',
    async close() {
      const closed = new Promise<void>((res) => server.close(() => res()))
      h1.closeIdleConnections()
      for (const s of sessions) s.close()
      h1.close()
      h2.close()
      // Give in-flight responses a moment, then cut what is left.
      await Promise.race([closed, new Promise((r) => setTimeout(r, 2000).unref())])
      for (const s of sockets) s.destroy()
      await closed
    },
  }
}

async function closeAll(server: http2.Http2SecureServer): Promise<void> {
  await new Promise<void>((res) => {
    server.close(() => res())
    setTimeout(() => res(), 2000).unref()
  })
}
