// The test gateway from the command line: one chat through a running endpoint picker, then to
// the endpoint it names and back through the stream, as Envoy's ext_proc filter would send it.
//   npx tsx test/epp/send-chat.ts 127.0.0.1:9002 [--plaintext] [--buffered] [--model M] [--content TEXT]
// Prints the picker's answer (destination header and metadata, or its immediate response) and
// the upstream's status and body; exits 1 if the two destination values differ or no answer came.
import { parseArgs } from 'node:util'
import { credentials } from '@grpc/grpc-js'
import { TestGateway, tlsSkipVerify } from './gateway.js'

const { values, positionals } = parseArgs({
  allowPositionals: true,
  options: {
    plaintext: { type: 'boolean', default: false },
    buffered: { type: 'boolean', default: false },
    model: { type: 'string', default: 'meta-llama/Llama-3.1-70B-Instruct' },
    content: { type: 'string', default: 'Say hello through the endpoint picker.' },
  },
})
const address = positionals[0]
if (address === undefined || !/^[^:]+:\d+$/.test(address)) {
  console.error(`usage: send-chat.ts HOST:PORT [--plaintext] [--buffered] [--model M] [--content TEXT]; got '${address ?? ''}'`)
  process.exit(2)
}
const gateway = new TestGateway(address, values.buffered ? 'buffered' : 'streamed', values.plaintext ? credentials.createInsecure() : tlsSkipVerify())
try {
  const body = JSON.stringify({ model: values.model, messages: [{ role: 'user', content: values.content }], max_tokens: 8 })
  const r = await gateway.chat({ body })
  if (r.immediate === undefined && r.header === undefined) {
    // No answer at all: say why (the picker not listening, TLS against plaintext, ...).
    console.error(`no answer from the picker at ${address}: ${r.stream.error?.details ?? r.stream.error?.message ?? 'the stream ended'}`)
    process.exit(1)
  }
  const { stream: _stream, bodyBack, ...shown } = r
  console.log(JSON.stringify({ ...shown, ...(bodyBack && { bodyBackBytes: bodyBack.length }) }, null, 2))
  const ok = r.immediate !== undefined || (r.header !== undefined && r.header === r.metadata && r.status !== undefined)
  process.exitCode = ok ? 0 : 1
} finally {
  gateway.close()
}
