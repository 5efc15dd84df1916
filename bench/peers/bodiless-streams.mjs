// A hostile gateway for bench/hostile-peers.bench.ts: ext_proc streams on the picker's gRPC port
// that send their request headers and never a body, all at once, on one connection.
// polite: node:http2's client, which honours the picker's SETTINGS_MAX_CONCURRENT_STREAMS as
// Envoy does, queueing the streams past it on its own side; rude: HTTP/2 frames written by hand
// on a TCP socket, every stream's HEADERS and DATA at once whatever the picker advertises (what
// a peer that ignores the limit does), the picker's answers read and dropped.
// Usage: node bench/peers/bodiless-streams.mjs HOST:PORT STREAMS SECONDS polite|rude [CONNECTIONS]
// Prints one JSON line when SECONDS have passed: streams opened, answered (the picker ended
// them; polite only), refused (RST_STREAM REFUSED_STREAM), connections lost; then exits.
import http2 from 'node:http2'
import net from 'node:net'
import { protos } from '../../dist/epp/protos.js'

const [address, streamsArg, secondsArg, manner = 'polite', connectionsArg = '1'] = process.argv.slice(2)
const streams = Number(streamsArg)
const seconds = Number(secondsArg)
const connections = Number(connectionsArg)
if (!address || !(streams > 0) || !(seconds > 0) || !(connections > 0) || !['polite', 'rude'].includes(manner)) {
  console.error('usage: node bench/peers/bodiless-streams.mjs HOST:PORT STREAMS SECONDS polite|rude [CONNECTIONS]')
  process.exit(2)
}

const Req = protos().root.lookupType('envoy.service.ext_proc.v3.ProcessingRequest')
const h = (key, value) => ({ key, raw_value: Buffer.from(value) })
const bytes = Req.encode(Req.fromObject({ request_headers: { headers: { headers: [h(':method', 'POST'), h(':path', '/v1/chat/completions'), h('content-type', 'application/json')] }, end_of_stream: false } })).finish()
const HEADERS = Buffer.alloc(5 + bytes.length)
HEADERS.writeUInt32BE(bytes.length, 1)
HEADERS.set(bytes, 5)

const count = { opened: 0, answered: 0, refused: 0, sessionsLost: 0 }
const sessions = []

function open(session) {
  const st = session.request({ ':method': 'POST', ':path': '/envoy.service.ext_proc.v3.ExternalProcessor/Process', 'content-type': 'application/grpc', te: 'trailers' })
  count.opened++
  st.on('error', () => {})
  // The picker's answer (its 408) counts once, whether its end comes as trailers or a reset.
  let answered = false
  st.on('data', () => {
    if (!answered) count.answered++
    answered = true
  })
  st.write(HEADERS)
  st.once('end', () => st.end())
  st.once('close', () => {
    if (st.rstCode === http2.constants.NGHTTP2_REFUSED_STREAM) count.refused++
  })
}

// HTTP/2 by hand (RFC 9113): a frame is a 9-byte header (length, type, flags, stream id) and
// its payload; the request's headers are HPACK literals without indexing, no Huffman (RFC 7541 6.2.2).
function frameOf(type, flags, stream, payload) {
  const f = Buffer.alloc(9 + payload.length)
  f.writeUIntBE(payload.length, 0, 3)
  f[3] = type
  f[4] = flags
  f.writeUInt32BE(stream, 5)
  payload.copy(f, 9)
  return f
}
const literal = (name, value) => Buffer.concat([Buffer.from([0x00, name.length]), Buffer.from(name), Buffer.from([value.length]), Buffer.from(value)])
const BLOCK = Buffer.concat([literal(':method', 'POST'), literal(':scheme', 'http'), literal(':path', '/envoy.service.ext_proc.v3.ExternalProcessor/Process'), literal(':authority', address), literal('content-type', 'application/grpc'), literal('te', 'trailers')])
const PREFACE = Buffer.from('PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n')
const END_HEADERS = 0x4

function rude(n) {
  const i = address.lastIndexOf(':')
  const socket = net.connect(Number(address.slice(i + 1)), address.slice(0, i))
  sessions.push({ destroy: () => socket.destroy() })
  socket.on('error', () => {})
  socket.once('close', () => count.sessionsLost++)
  // The frames the picker sends back, read for its RST_STREAMs and SETTINGS (acknowledged), the rest dropped.
  let pending = Buffer.alloc(0)
  socket.on('data', (d) => {
    pending = pending.length === 0 ? d : Buffer.concat([pending, d])
    while (pending.length >= 9) {
      const len = pending.readUIntBE(0, 3)
      if (pending.length < 9 + len) break
      const type = pending[3]
      const flags = pending[4]
      if (type === 0x3 && pending.readUInt32BE(9) === http2.constants.NGHTTP2_REFUSED_STREAM) count.refused++
      if (type === 0x4 && (flags & 0x1) === 0) socket.write(frameOf(0x4, 0x1, 0, Buffer.alloc(0)))
      // The connection's flow-control window: the DATA frames go out as the picker opens it.
      if (type === 0x8 && pending.readUInt32BE(5) === 0) {
        window += pending.readUInt32BE(9) & 0x7fffffff
        sendData()
      }
      pending = pending.subarray(9 + len)
    }
  })
  let window = 65_535
  const data = []
  const sendData = () => {
    const out = []
    while (data.length > 0 && window >= HEADERS.length) {
      out.push(frameOf(0x0, 0, data.shift(), HEADERS))
      window -= HEADERS.length
    }
    if (out.length > 0) socket.write(Buffer.concat(out))
  }
  const out = [PREFACE, frameOf(0x4, 0, 0, Buffer.alloc(0))]
  for (let k = 0; k < n; k++) {
    const id = 2 * k + 1
    out.push(frameOf(0x1, END_HEADERS, id, BLOCK))
    data.push(id)
    count.opened++
  }
  socket.write(Buffer.concat(out))
  sendData()
}

const per = Math.ceil(streams / connections)
for (let c = 0; c < connections; c++) {
  if (manner === 'rude') {
    rude(Math.min(per, streams - c * per))
    continue
  }
  // The TCP connection kept, to cut it at the end: destroying the session instead would first
  // send the streams node:http2 still queues, one for each slot the closing ones free.
  const i = address.lastIndexOf(':')
  let socket
  // maxSessionMemory: node:http2 stops taking frames on a session holding more than 10 MB, and 20,000 queued streams do.
  const session = http2.connect(`http://${address}`, { maxSessionMemory: 1024, createConnection: () => (socket = net.connect(Number(address.slice(i + 1)), address.slice(0, i))) })
  sessions.push({ destroy: () => socket.destroy() })
  session.on('error', () => {})
  session.once('close', () => count.sessionsLost++)
  const n = Math.min(per, streams - c * per)
  session.once('remoteSettings', () => {
    for (let i = 0; i < n; i++) open(session)
  })
}

setTimeout(() => {
  process.stdout.write(`${JSON.stringify(count)}\n`)
  for (const s of sessions) s.destroy()
  setTimeout(() => process.exit(0), 100)
}, seconds * 1000)
