// The front door: HTTP/1.1 and HTTP/2 with prior knowledge (h2c) on one port (src/net/h2c-sniff.ts),
// or TLS with ALPN offering h2 and http/1.1.
import { readFileSync } from 'node:fs'
import http from 'node:http'
import http2 from 'node:http2'
import type net from 'node:net'
import type { AddressInfo } from 'node:net'
import type { Config } from '../config/config.js'
import { descriptorNeeds } from '../config/fd-needs.js'
import { frontMaxConnections } from '../net/fd-limit.js'
import { h1h2cServer } from '../net/h2c-sniff.js'
import { FrontConnections } from './connections.js'
import { h1Options } from '../runtime/h1-options.js'
import { checkContinue } from './expect.js'
import type { Req, Res } from './types.js'

export interface FrontServer {
  readonly address: AddressInfo
  readonly protocol: 'http' | 'https'
  /** Connections held at once; one more is closed as soon as it is accepted. */
  readonly maxConnections: number
  /**
   * From now on every HTTP/1.1 response says Connection: close and closes its connection, and
   * HTTP/2 sessions, open or opened later, get GOAWAY (their open streams finish). New
   * connections are still accepted.
   */
  beginDrain(): void
  /** Stops listening (begins the drain if not begun) and closes idle connections and sessions; resolves once the port is closed. */
  stopAccepting(): Promise<void>
  openConnections(): number
  /** Connections closed on accept because maxConnections were open. */
  readonly refused: number
  /** Destroys every connection left, busy or not. */
  destroyAll(): void
  /** All of the above: what is still busy after 2 s is destroyed. */
  close(): Promise<void>
}

type Handler = (req: Req, res: Res) => void

const h2Settings: http2.Settings = { maxConcurrentStreams: 1000, initialWindowSize: 1 << 20 }

export async function listenFront(config: Config, handler: Handler, exclusive = false): Promise<FrontServer> {
  const { host, port } = config.listen
  const conns = new FrontConnections(config.limits)
  const front = config.tls ? tlsFront(config, conns, handler) : h2cFront(config, conns, handler)
  const server = front.server
  // Beyond it Node closes each new connection at once: refused, not queued behind the others.
  server.maxConnections = frontMaxConnections(descriptorNeeds(config))
  let refused = 0
  server.on('drop', () => refused++)
  await new Promise<void>((res, rej) => server.once('error', rej).listen({ port, host, exclusive }, res))
  front.listening()
  // 'close' comes once the port is closed and every connection has ended.
  const closed = new Promise<void>((res) => server.once('close', () => res()))
  const stopAccepting = async () => {
    if (server.listening) server.close()
    conns.closeIdle()
  }
  return {
    address: server.address() as AddressInfo,
    protocol: config.tls ? 'https' : 'http',
    maxConnections: server.maxConnections,
    beginDrain: () => conns.beginDrain(),
    stopAccepting,
    openConnections: () => conns.open,
    get refused() {
      return refused
    },
    destroyAll: () => conns.destroyAll(),
    async close() {
      await stopAccepting()
      // Give in-flight responses a moment, then cut what is left.
      await Promise.race([closed, new Promise((r) => setTimeout(r, 2000).unref())])
      conns.destroyAll()
      await closed
      front.closed()
    },
  }
}

interface Built {
  server: net.Server
  listening(): void
  closed(): void
}

type H1Listener = http.RequestListener
type H2Listener = (req: http2.Http2ServerRequest, res: http2.Http2ServerResponse) => void

function listeners(config: Config, conns: FrontConnections, handler: Handler) {
  return {
    onRequest: conns.track(handler) as H1Listener & H2Listener,
    onContinue: conns.track(checkContinue(config.limits.maxBodyBytes, handler)) as H1Listener & H2Listener,
  }
}

function h2cFront(config: Config, conns: FrontConnections, handler: Handler): Built {
  const { onRequest, onContinue } = listeners(config, conns, handler)
  const h1 = http.createServer(h1Options(config), onRequest)
  const h2 = http2.createServer({ settings: h2Settings }, onRequest)
  h1.on('checkContinue', onContinue)
  h2.on('checkContinue', onContinue).on('session', conns.session)
  return {
    server: h1h2cServer(h1, h2, conns.accepted, config.limits.headersTimeoutMs),
    // The HTTP/1.1 server never listens itself; start its timeout checks as if it did.
    listening: () => h1.emit('listening'),
    closed() {
      h1.close()
      h2.close()
    },
  }
}

function tlsFront(config: Config, conns: FrontConnections, handler: Handler): Built {
  const { onRequest, onContinue } = listeners(config, conns, handler)
  const files = config.tls!
  const server = http2.createSecureServer(
    {
      cert: readFileSync(files.cert),
      key: readFileSync(files.key),
      allowHTTP1: true,
      settings: h2Settings,
      noDelay: true,
      // No HTTP timeout runs before the handshake ends (0 would mean Node's 120 s).
      handshakeTimeout: config.limits.headersTimeoutMs,
    },
    onRequest,
  )
  // Node's HTTP/1.1 code serves allowHTTP1 connections and reads these from the server.
  Object.assign(server, h1Options(config))
  // The HTTP/1.1 and HTTP/2 sides both raise 'checkContinue' on this one server.
  server.on('checkContinue', onContinue).on('session', conns.session).on('connection', conns.accepted)
  return { server, listening: () => {}, closed: () => {} }
}
