// One JSON object per line over TCP: the wire format of the simulator's KV side channel and
// bootstrap server (its own, not NIXL's or SGLang's: those move GPU memory; this moves a few
// words of bookkeeping, and the transfer time is the model's).
import net from 'node:net'

/** Lines longer than this close the connection: every message of ours is a few hundred bytes. */
const MAX_LINE = 64 * 1024

export type Message = Record<string, unknown>

/** Calls `onMessage` for each JSON object line; a bad line or an oversized one ends the socket with an error reply. */
export function readMessages(socket: net.Socket, onMessage: (m: Message) => void): void {
  let buf = ''
  socket.setEncoding('utf8')
  socket.on('data', (chunk: string) => {
    buf += chunk
    let i: number
    while ((i = buf.indexOf('\n')) >= 0) {
      const line = buf.slice(0, i)
      buf = buf.slice(i + 1)
      if (line.trim() === '') continue
      let m: unknown
      try {
        m = JSON.parse(line)
      } catch {
        return fail(socket, 'each line must be one JSON object')
      }
      if (m === null || typeof m !== 'object' || Array.isArray(m)) return fail(socket, 'each line must be one JSON object')
      onMessage(m as Message)
      if (socket.destroyed) return
    }
    if (buf.length > MAX_LINE) fail(socket, `lines are limited to ${MAX_LINE} bytes`)
  })
}

export function send(socket: net.Socket, m: Message): void {
  if (!socket.destroyed && socket.writable) socket.write(`${JSON.stringify(m)}\n`)
}

/** Answers an error and closes. */
export function fail(socket: net.Socket, error: string): void {
  if (socket.destroyed) return
  socket.end(`${JSON.stringify({ ok: false, error })}\n`)
}

/**
 * Where a peer may be reached: IP literals and `localhost` only, so that parameters naming
 * some host never make the simulator resolve a name over the network. Undefined if unusable.
 */
export function peerAddress(host: unknown, port: unknown): { host: string; port: number } | undefined {
  if (typeof host !== 'string' || (net.isIP(host) === 0 && host !== 'localhost')) return undefined
  const p = typeof port === 'string' && /^\d+$/.test(port) ? Number(port) : port
  if (typeof p !== 'number' || !Number.isInteger(p) || p < 1 || p > 65535) return undefined
  return { host, port: p }
}

/** Wall ms a connection attempt may take before the peer counts as unreachable. */
export const CONNECT_TIMEOUT_MS = 5000

/**
 * Connects, sends `first`, and passes every reply to `onMessage`; `onGone(reason)` once, when
 * the connection fails or ends (reason null when it ended cleanly).
 */
export function connect(
  addr: { host: string; port: number },
  first: Message,
  onMessage: (m: Message, socket: net.Socket) => void,
  onGone: (reason: string | null) => void,
): net.Socket {
  const socket = net.connect({ host: addr.host, port: addr.port })
  let gone = false
  const end = (reason: string | null): void => {
    if (gone) return
    gone = true
    onGone(reason)
  }
  socket.setTimeout(CONNECT_TIMEOUT_MS, () => {
    socket.destroy()
    end(`no answer from ${addr.host}:${addr.port} in ${CONNECT_TIMEOUT_MS} ms`)
  })
  socket.once('connect', () => {
    socket.setTimeout(0)
    send(socket, first)
  })
  socket.on('error', (err: NodeJS.ErrnoException) => end(`cannot reach ${addr.host}:${addr.port}: ${err.code ?? err.message}`))
  socket.on('close', () => end(null))
  readMessages(socket, (m) => onMessage(m, socket))
  return socket
}
