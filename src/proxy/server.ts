// The front door: HTTP/1.1 and HTTP/2 with prior knowledge (h2c) on one port, told apart by
// the first bytes (RFC 9113 section 3.4: every h2c connection starts with the preface), or
// TLS with ALPN offering h2 and http/1.1.
import { readFileSync } from 'node:fs'
import http from 'node:http'
import http2 from 'node:http2'
import net, { type AddressInfo } from 'node:net'
import type { Config } from '../config.js'
import type { Req, Res } from './types.js'

const PREFACE = Buffer.from('PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n')

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
  // noDelay: responses go out as several small writes (headers, SSE events); Nagle would hold them.
  const server = net.createServer({ noDelay: true }, (socket) => {
    sockets.add(socket)
    socket.once('close', () => sockets.delete(socket))
    let seen: Buffer = Buffer.alloc(0)
    const onData = (chunk: Buffer) => {
      seen = seen.length === 0 ? chunk : Buffer.concat([seen, chunk])
      const n = Math.min(seen.length, PREFACE.length)
      const h2c = seen.subarray(0, n).equals(PREFACE.subarray(0, n))
      if (h2c && seen.length < PREFACE.length) return // a prefix of the preface: need more bytes
      socket.removeListener('data', onData)
      socket.pause()
      socket.unshift(seen)
      if (h2c) {
        // Http2Session takes over the socket's handle and first drains what is buffered
        // in JS (socket.read()): resuming here would hand those bytes to no one.
        h2.emit('connection', socket)
      } else {
        h1.emit('connection', socket)
        socket.resume()
      }
    }
    socket.on('data', onData)
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
