// The floor for an endpoint picker on Node: grpc-js serving ExternalProcessor/Process with the
// picker's own codec (dist/epp/codec.js) and its own answers, but no routing at all: no key read,
// no pick, no lease, no metrics, no log. Every request is answered as the picker answers it in
// FULL_DUPLEX_STREAMED mode (the destination on the body's end, the body handed back, the
// response headers continued, the response body chunks handed back), to one fixed endpoint.
// What it costs a request is what grpc-js, protobufjs and Node's HTTP/2 cost any picker on Node.
// Usage: node bench/peers/grpc-floor.mjs HOST:PORT (the endpoint named); prints "listening <port>".
import { Server, ServerCredentials } from '@grpc/grpc-js'
import { externalProcessorServer } from '../../dist/epp/codec.js'
import { continueResponse, destinationResponse, streamedBody, bytesOf } from '../../dist/epp/messages.js'

const endpoint = process.argv[2] ?? '127.0.0.1:1'
const server = new Server({ 'grpc.enable_channelz': 0 })
server.addService(externalProcessorServer(), {
  Process(call) {
    call.on('data', (m) => {
      switch (m.request) {
        case 'request_headers':
          if (m.request_headers.end_of_stream) call.write(destinationResponse('request_headers', endpoint))
          break
        case 'request_body': {
          const b = m.request_body
          // As the picker in full-duplex mode: the headers' answer names the destination once the
          // whole body is in, then the body goes back (one chunk here, as the benchmark sends it).
          if (b.end_of_stream) call.write(destinationResponse('request_headers', endpoint))
          call.write(streamedBody('request_body', bytesOf(b.body), b.end_of_stream))
          break
        }
        case 'response_headers':
          call.write(continueResponse('response_headers'))
          break
        case 'response_body':
          call.write(streamedBody('response_body', bytesOf(m.response_body.body), m.response_body.end_of_stream))
          break
        default:
          call.write(continueResponse(m.request))
      }
    })
    call.on('end', () => call.end())
    call.on('error', () => undefined)
  },
})
server.bindAsync('127.0.0.1:0', ServerCredentials.createInsecure(), (err, port) => {
  if (err) throw err
  console.log(`listening ${port}`)
})
