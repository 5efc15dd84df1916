// ext_proc messages, as proto-loader gives and takes them (protos.ts: snake_case fields, the
// set oneof member named, google.protobuf.Struct's Value members camelCase as protobufjs keeps
// them): what the picker reads from Envoy's requests and the responses it builds.
import type { ProxyError } from '../request/errors.js'
import { REQUEST_ID_HEADER } from '../request/request-id.js'
import { Encoded, encodeResponse } from './codec.js'

/** The header and dynamic-metadata key naming the endpoints picked (protocol: Destination Endpoint). */
export const DESTINATION = 'x-gateway-destination-endpoint'
/** The dynamic- and filter-metadata namespace of the destination and of the endpoint served. */
export const LB_NAMESPACE = 'envoy.lb'
/** The filter-metadata namespace and key of the gateway's subset hint. */
export const SUBSET_NAMESPACE = 'envoy.lb.subset_hint'
export const SUBSET_KEY = 'x-gateway-destination-endpoint-subset'
/** The filter-metadata key (under envoy.lb) naming the endpoint that served the response. */
export const SERVED_KEY = 'x-gateway-destination-endpoint-served'

export type { HttpBody, HttpHeaders, Metadata, ProcessingRequest, ProcessingResponse } from './message-types.js'
import type { HttpHeaders, Metadata, Phase, ProcessingResponse, StructValue } from './message-types.js'

const EMPTY = Buffer.alloc(0)

/** A bytes field as a Buffer: the same memory (protobufjs decodes views into the message on Node), never a copy. */
export function bytesOf(b: Uint8Array | null | undefined): Buffer {
  if (b === undefined || b === null || b.length === 0) return EMPTY
  return Buffer.isBuffer(b) ? b : Buffer.from(b.buffer, b.byteOffset, b.byteLength)
}

/** The headers, names lowercased, values from `raw_value` (Envoy's choice) or `value`; repeated names joined by commas. */
export function headersOf(h: HttpHeaders | null | undefined): Record<string, string> {
  const out: Record<string, string> = {}
  for (const { key, value, raw_value } of h?.headers?.headers ?? []) {
    const k = key.toLowerCase()
    const v = raw_value && raw_value.length > 0 ? bytesOf(raw_value).toString('latin1') : (value ?? '')
    out[k] = out[k] === undefined ? v : `${out[k]},${v}`
  }
  return out
}

function strings(v: StructValue | undefined): string[] | undefined {
  if (v === undefined) return undefined
  if (v.listValue !== undefined && v.listValue !== null) return (v.listValue.values ?? []).flatMap((x) => strings(x) ?? [])
  if (typeof v.stringValue === 'string') return v.stringValue.split(',').map((s) => s.trim()).filter(Boolean)
  return []
}

/** The gateway's subset hint (filter metadata envoy.lb.subset_hint), or undefined when it sets none. */
export function subsetHint(m: Metadata | null | undefined): string[] | undefined {
  return strings(m?.filter_metadata?.[SUBSET_NAMESPACE]?.fields?.[SUBSET_KEY])
}

/** The endpoint that served the response (filter metadata envoy.lb), when the gateway says. */
export function servedOf(m: Metadata | null | undefined): string | undefined {
  const v = m?.filter_metadata?.[LB_NAMESPACE]?.fields?.[SERVED_KEY]
  return typeof v?.stringValue === 'string' && v.stringValue !== '' ? v.stringValue : undefined
}

const setHeader = (key: string, value: string) => ({ header: { key, raw_value: Buffer.from(value, 'latin1') } })

/**
 * The header llm-d's routing sidecar reads on a decode pod: the prefill pod (host:port) it is to
 * send the prefill leg to before passing the request on to its own vLLM.
 */
export const PREFILLER = 'x-prefiller-host-port'

/**
 * The answer naming the destination: the header mutation and the same value in dynamic
 * metadata. A disaggregated request names its prefill pod too (PREFILLER); any other has that
 * header removed, so that a client cannot point a decode pod's sidecar at a host of its choosing.
 * `requestId`: the x-request-id to send upstream in place of an unusable one.
 */
export function destinationResponse(phase: 'request_headers' | 'request_body', value: string, prefiller?: string, requestId?: string): ProcessingResponse {
  const header_mutation =
    prefiller === undefined ? { set_headers: [setHeader(DESTINATION, value)], remove_headers: [PREFILLER] } : { set_headers: [setHeader(DESTINATION, value), setHeader(PREFILLER, prefiller)] }
  if (requestId !== undefined) header_mutation.set_headers.push(setHeader(REQUEST_ID_HEADER, requestId))
  return {
    [phase]: { response: { header_mutation, clear_route_cache: true } },
    dynamic_metadata: { fields: { [LB_NAMESPACE]: { structValue: { fields: { [DESTINATION]: { stringValue: value } } } } } },
  }
}

const continued = new Map<Phase, Encoded>()

/** Go on, unchanged (a headers or body message, request or response): the same bytes every time, encoded once. */
export function continueResponse(phase: Phase): Encoded {
  let e = continued.get(phase)
  if (e === undefined) continued.set(phase, (e = new Encoded(encodeResponse(phase.endsWith('trailers') ? { [phase]: {} } : { [phase]: { response: {} } }))))
  return e
}

/** A body chunk handed back as it came (full-duplex streamed mode). */
export function streamedBody(phase: 'request_body' | 'response_body', body: Uint8Array, endOfStream: boolean): ProcessingResponse {
  return { [phase]: { response: { body_mutation: { streamed_response: { body, end_of_stream: endOfStream } } } } }
}

/** The picker answers the client itself: status, OpenAI-style JSON body and the error's headers. */
export function immediateResponse(err: ProxyError): ProcessingResponse {
  const headers = { 'content-type': 'application/json', ...err.headers }
  return {
    immediate_response: {
      status: { code: err.status },
      headers: { set_headers: Object.entries(headers).map(([k, v]) => setHeader(k, v)) },
      body: Buffer.from(err.body()),
      details: err.code,
    },
  }
}
