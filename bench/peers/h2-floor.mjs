// A lower floor than grpc-floor.mjs: the same answers, served on node:http2 directly with gRPC's
// framing written by hand (5-byte prefix, grpc-status trailers). What a picker on Node's HTTP/2
// without grpc-js would cost.
import http2 from 'node:http2'
import { decodeRequest, encodeResponse } from '../../dist/epp/codec.js'
import { continueResponse, destinationResponse, streamedBody, bytesOf } from '../../dist/epp/messages.js'

const endpoint = process.argv[2] ?? '127.0.0.1:1'
const server = http2.createServer()
function frame(msg) {
  const b = encodeResponse(msg)
  const out = Buffer.allocUnsafe(5 + b.length)
  out[0] = 0
  out.writeUInt32BE(b.length, 1)
  b.copy(out, 5)
  return out
}
server.on('stream', (stream, headers) => {
  stream.respond({ ':status': 200, 'content-type': 'application/grpc' }, { waitForTrailers: true })
  stream.on('wantTrailers', () => stream.sendTrailers({ 'grpc-status': '0' }))
  let buf = Buffer.alloc(0)
  const handle = (m) => {
    switch (m.request) {
      case 'request_headers':
        if (m.request_headers.end_of_stream) stream.write(frame(destinationResponse('request_headers', endpoint)))
        break
      case 'request_body': {
        const b = m.request_body
        if (b.end_of_stream) stream.write(frame(destinationResponse('request_headers', endpoint)))
        stream.write(frame(streamedBody('request_body', bytesOf(b.body), b.end_of_stream)))
        break
      }
      case 'response_headers':
        stream.write(frame(continueResponse('response_headers')))
        break
      case 'response_body':
        stream.write(frame(streamedBody('response_body', bytesOf(m.response_body.body), m.response_body.end_of_stream)))
        break
      default:
        stream.write(frame(continueResponse(m.request)))
    }
  }
  stream.on('data', (chunk) => {
    buf = buf.length === 0 ? chunk : Buffer.concat([buf, chunk])
    while (buf.length >= 5) {
      const n = buf.readUInt32BE(1)
      if (buf.length < 5 + n) break
      handle(decodeRequest(buf.subarray(5, 5 + n)))
      buf = buf.subarray(5 + n)
    }
  })
  stream.on('end', () => stream.end())
  stream.on('error', () => undefined)
})
server.listen(0, '127.0.0.1', () => console.log(`listening ${server.address().port}`))
