// The ext_proc messages' shapes as protobufjs decodes them (snake_case fields, the set oneof
// member named, Struct's Value members camelCase), apart from the builders so that the codec
// can name them without importing what uses the codec.
export interface HeaderValue {
  key: string
  value?: string
  raw_value?: Uint8Array | null
}
export interface HttpHeaders {
  headers?: { headers?: HeaderValue[] } | null
  end_of_stream?: boolean
}
export interface HttpBody {
  body?: Uint8Array | null
  end_of_stream?: boolean
}
/** google.protobuf.Value as protobufjs decodes it. */
export interface StructValue {
  stringValue?: string
  listValue?: { values?: StructValue[] }
  structValue?: Struct
  kind?: string
}
export interface Struct {
  fields?: Record<string, StructValue>
}
export interface Metadata {
  filter_metadata?: Record<string, Struct>
}
export interface ProcessingRequest {
  request?: 'request_headers' | 'response_headers' | 'request_body' | 'response_body' | 'request_trailers' | 'response_trailers'
  request_headers?: HttpHeaders | null
  response_headers?: HttpHeaders | null
  request_body?: HttpBody | null
  response_body?: HttpBody | null
  metadata_context?: Metadata | null
  observability_mode?: boolean
}
export type ProcessingResponse = Record<string, unknown>
export type Phase = 'request_headers' | 'response_headers' | 'request_body' | 'response_body' | 'request_trailers' | 'response_trailers'
