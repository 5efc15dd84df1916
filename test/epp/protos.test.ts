// The ext_proc definitions the picker speaks, pinned to the wire: the full-duplex additions
// (BodyMutation.streamed_response = 3, StreamedBodyResponse, BodySendMode FULL_DUPLEX_STREAMED = 4)
// that the vendored Envoy API lacks must encode with upstream Envoy's numbers.
import { execFileSync } from 'node:child_process'
import { join } from 'node:path'
import { fileURLToPath, pathToFileURL } from 'node:url'
import { describe, expect, it } from 'vitest'
import { EXT_PROC_SERVICE, externalProcessor, healthService, protos } from '../../src/epp/protos.js'
import { externalProcessorServer } from '../../src/epp/codec.js'
import { continueResponse, headersOf, streamedBody, subsetHint } from '../../src/epp/messages.js'

// ProcessingResponse { request_body(3) { response(1) { body_mutation(3) { streamed_response(3) { body(1) "hi", end_of_stream(2) true } } } } }
const STREAMED_HI = Buffer.from([0x1a, 12, 0x0a, 10, 0x1a, 8, 0x1a, 6, 0x0a, 2, 0x68, 0x69, 0x10, 1])

describe('ext_proc protos', () => {
  it('encodes a streamed_response body mutation with upstream Envoy field numbers', () => {
    const process = externalProcessor().service.Process!
    const bytes = process.responseSerialize({ request_body: { response: { body_mutation: { streamed_response: { body: Buffer.from('hi'), end_of_stream: true } } } } })
    expect(Buffer.from(bytes)).toEqual(STREAMED_HI)
  })

  it('decodes those bytes back, naming the set oneof members', () => {
    const process = externalProcessor().service.Process!
    const m = process.responseDeserialize(STREAMED_HI) as { response: string; request_body: { response: { body_mutation: { mutation: string; streamed_response: { body: Buffer; end_of_stream: boolean } } } } }
    expect(m.response).toBe('request_body')
    const mut = m.request_body.response.body_mutation
    expect(mut.mutation).toBe('streamed_response')
    expect(Buffer.from(mut.streamed_response.body).toString()).toBe('hi')
    expect(mut.streamed_response.end_of_stream).toBe(true)
  })

  it('knows BodySendMode FULL_DUPLEX_STREAMED = 4 beside the vendored values', () => {
    const e = protos().root.lookupEnum('envoy.extensions.filters.http.ext_proc.v3.ProcessingMode.BodySendMode')
    expect(e.values).toMatchObject({ NONE: 0, STREAMED: 1, BUFFERED: 2, FULL_DUPLEX_STREAMED: 4 })
  })

  it('loads the request side with snake_case fields and Struct values camelCase', () => {
    const process = externalProcessor().service.Process!
    const req = { request_headers: { headers: { headers: [{ key: ':path', raw_value: Buffer.from('/v1/chat/completions') }] }, end_of_stream: false }, metadata_context: { filter_metadata: { 'envoy.lb.subset_hint': { fields: { 'x-gateway-destination-endpoint-subset': { listValue: { values: [{ stringValue: '10.0.0.1:8000' }] } } } } } } }
    const back = process.requestDeserialize(process.requestSerialize(req)) as typeof req & { request: string }
    expect(back.request).toBe('request_headers')
    expect(Buffer.from(back.request_headers.headers.headers[0]!.raw_value).toString()).toBe('/v1/chat/completions')
    expect(back.metadata_context.filter_metadata['envoy.lb.subset_hint']!.fields['x-gateway-destination-endpoint-subset']!.listValue.values[0]!.stringValue).toBe('10.0.0.1:8000')
  })

  it("the picker's own codec: its answers encode to the same bytes, and what proto-loader's clients send reads the same", () => {
    const server = externalProcessorServer().Process!
    const client = externalProcessor().service.Process!
    expect(Buffer.from(server.responseSerialize(streamedBody('request_body', Buffer.from('hi'), true)))).toEqual(STREAMED_HI)
    // An answer encoded once decodes as proto-loader's would have built it.
    expect(client.responseDeserialize(server.responseSerialize(continueResponse('response_headers')))).toMatchObject({ response: 'response_headers', response_headers: { response: {} } })
    const req = {
      request_headers: { headers: { headers: [{ key: ':PATH', raw_value: Buffer.from('/v1/chat/completions') }, { key: 'x-a', value: 'plain' }] }, end_of_stream: false },
      metadata_context: { filter_metadata: { 'envoy.lb.subset_hint': { fields: { 'x-gateway-destination-endpoint-subset': { listValue: { values: [{ stringValue: '10.0.0.1:8000' }] } } } } } },
    }
    const m = server.requestDeserialize(client.requestSerialize(req)) as import('../../src/epp/messages.js').ProcessingRequest
    expect(m.request).toBe('request_headers')
    expect(m.request_headers?.end_of_stream).toBe(false)
    expect(headersOf(m.request_headers)).toEqual({ ':path': '/v1/chat/completions', 'x-a': 'plain' })
    expect(subsetHint(m.metadata_context)).toEqual(['10.0.0.1:8000'])
    const body = server.requestDeserialize(client.requestSerialize({ request_body: { body: Buffer.from('{"a":1}'), end_of_stream: true } })) as import('../../src/epp/messages.js').ProcessingRequest
    expect(body.request).toBe('request_body')
    expect(Buffer.isBuffer(body.request_body?.body)).toBe(true)
    expect(Buffer.from(body.request_body!.body!).toString()).toBe('{"a":1}')
    expect(body.request_body?.end_of_stream).toBe(true)
  })

  it('has the health service and the service name the picker reports', () => {
    expect(Object.keys(healthService().service)).toEqual(['Check', 'Watch'])
    expect(EXT_PROC_SERVICE).toBe('envoy.service.ext_proc.v3.ExternalProcessor')
  })

  it('the published package has health.proto where dist/epp/protos.js finds it', async () => {
    const root = fileURLToPath(new URL('../..', import.meta.url))
    const out = execFileSync('npm', ['pack', '--dry-run', '--json', '--ignore-scripts'], { cwd: root, encoding: 'utf8' })
    const packed = new Set((JSON.parse(out) as { files: { path: string }[] }[])[0]!.files.map((f) => f.path))
    expect(packed.has('src/epp/proto/health.proto')).toBe(true)
    expect(packed.has('dist/epp/protos.js')).toBe(true)
    const dist = (await import(pathToFileURL(join(root, 'dist/epp/protos.js')).href)) as typeof import('../../src/epp/protos.js')
    expect(Object.keys(dist.healthService().service)).toEqual(['Check', 'Watch'])
  })
})
