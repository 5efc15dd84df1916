import http2 from 'node:http2'
import { protos } from '../src/epp/protos.js'
const Req = protos().root.lookupType('envoy.service.ext_proc.v3.ProcessingRequest')
const h = (key: string, value: string) => ({ key, raw_value: Buffer.from(value) })
const bytes = Req.encode(Req.fromObject({ request_headers: { headers: { headers: [h(':method', 'POST'), h(':path', '/v1/chat/completions'), h('content-type', 'application/json')] }, end_of_stream: false } })).finish()
const HEADERS = Buffer.alloc(5 + bytes.length); HEADERS.writeUInt32BE(bytes.length, 1); HEADERS.set(bytes, 5)
const s = http2.connect('http://127.0.0.1:19777')
await new Promise((r) => s.once('connect', r))
const n = Number(process.argv[2])
let closed = 0
const t0 = Date.now()
await Promise.all(Array.from({ length: n }, () => new Promise<void>((resolve) => {
  const st = s.request({ ':method': 'POST', ':path': '/envoy.service.ext_proc.v3.ExternalProcessor/Process', 'content-type': 'application/grpc', te: 'trailers' })
  st.on('error', () => {}); st.resume(); st.write(HEADERS); st.once('end', () => st.end()); st.once('close', () => { closed++; resolve() })
})))
console.log('closed', closed, Date.now() - t0, 'ms')
s.close()
