// HTTP/1.1 and HTTP/2 with prior knowledge (h2c) on one port: every h2c connection opens
// with the connection preface (RFC 9113 section 3.4), so the first bytes tell them apart.
import type http from 'node:http'
import type http2 from 'node:http2'
import net from 'node:net'

const PREFACE = Buffer.from('PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n')

/**
 * Hands the socket to the HTTP/2 server if it starts with the preface, else to the HTTP/1.1 one.
 * Until then neither server's timeouts cover it, so a socket still undecided after timeoutMs
 * (0: never) is destroyed: a client that sends nothing, or part of the preface, holds a
 * descriptor forever otherwise.
 */
export function sniffH2c(socket: net.Socket, h1: http.Server, h2: http2.Http2Server, timeoutMs = 0): void {
  let seen: Buffer = Buffer.alloc(0)
  const timer = timeoutMs > 0 ? setTimeout(() => socket.destroy(), timeoutMs) : undefined
  const stopTimer = () => clearTimeout(timer)
  if (timer) socket.once('close', stopTimer)
  const onData = (chunk: Buffer) => {
    seen = seen.length === 0 ? chunk : Buffer.concat([seen, chunk])
    const n = Math.min(seen.length, PREFACE.length)
    const h2c = seen.subarray(0, n).equals(PREFACE.subarray(0, n))
    if (h2c && seen.length < PREFACE.length) return // a prefix of the preface: need more bytes
    socket.removeListener('data', onData)
    if (timer) {
      stopTimer()
      socket.removeListener('close', stopTimer)
    }
    socket.pause()
    socket.unshift(seen)
    if (h2c) {
      // Http2Session takes over the socket's handle and first drains what is buffered in JS
      // (socket.read()): resuming here would hand those bytes to no one.
      h2.emit('connection', socket)
    } else {
      h1.emit('connection', socket)
      socket.resume()
    }
  }
  socket.on('data', onData)
}

/**
 * A net.Server that sniffs each connection. noDelay: answers go out as several small writes
 * (headers, then SSE events), which Nagle's algorithm would hold back for delayed ACKs.
 */
export function h1h2cServer(h1: http.Server, h2: http2.Http2Server, onSocket?: (socket: net.Socket) => void, timeoutMs = 0): net.Server {
  return net.createServer({ noDelay: true }, (socket) => {
    onSocket?.(socket)
    sniffH2c(socket, h1, h2, timeoutMs)
  })
}
