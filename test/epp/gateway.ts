// A test gateway: what Envoy's ext_proc filter sends the endpoint picker (request headers,
// the body streamed or buffered, then the response's headers and body chunks, end of stream;
// or a cancel or half-close at any point), built from the picker's own protos, and an HTTP
// forward to the endpoint it is given, whose answer goes back through the stream.
import { credentials, type ChannelCredentials, type ClientDuplexStream, type ServiceError } from '@grpc/grpc-js'
import { connect } from 'node:tls'
import { request } from 'undici'
import { externalProcessor, healthService, protos } from '../../src/epp/protos.js'
import { DESTINATION, LB_NAMESPACE, SERVED_KEY, SUBSET_KEY, SUBSET_NAMESPACE } from '../../src/epp/messages.js'

type Msg = any

/** One ext_proc stream, its answers queued as they come. */
export class GatewayStream {
  readonly received: Msg[] = []
  #waiters: (() => void)[] = []
  #next = 0
  ended = false
  error: ServiceError | undefined
  /** Writes not yet handed to the HTTP/2 stream (their callbacks not called yet). */
  #unsent = 0
  #cancelWanted = false

  constructor(readonly call: ClientDuplexStream<Msg, Msg>) {
    call.on('data', (m: Msg) => {
      this.received.push(m)
      this.#wake()
    })
    call.on('end', () => {
      this.ended = true
      this.#wake()
    })
    call.on('error', (e: ServiceError) => {
      this.error = e
      this.ended = true
      this.#wake()
    })
  }

  #wake(): void {
    for (const w of this.#waiters.splice(0)) w()
  }

  send(m: Msg): void {
    this.#unsent++
    this.call.write(m, () => {
      this.#unsent--
      if (this.#cancelWanted && this.#unsent === 0) this.call.cancel()
    })
  }

  /** The next answer, or undefined when the stream ended first. */
  async next(): Promise<Msg | undefined> {
    while (this.#next >= this.received.length) {
      if (this.ended) return undefined
      await new Promise<void>((r) => this.#waiters.push(r))
    }
    return this.received[this.#next++]
  }

  /** Resolves when the picker has ended the stream. */
  async closed(): Promise<void> {
    while (!this.ended) await new Promise<void>((r) => this.#waiters.push(r))
  }

  /**
   * RST_STREAM, as Envoy resets a stream it gives up on. grpc-js's client drops a cancel made
   * before the call has its HTTP/2 stream (its resolving call creates the stream after the
   * cancel and never resets it: the stream stays open on the wire with what was written), so the
   * cancel waits until what was written has reached the HTTP/2 stream: then it resets that.
   */
  cancel(): void {
    this.#cancelWanted = true
    if (this.#unsent === 0 || this.ended) this.call.cancel()
  }

  halfClose(): void {
    this.call.end()
  }
}

const header = (key: string, value: string) => ({ key, raw_value: Buffer.from(value) })

export interface ChatOptions {
  path?: string
  body: string | Buffer
  headers?: Record<string, string>
  /** The subset hint (filter metadata envoy.lb.subset_hint). */
  subset?: string[]
  /** Body chunk size in streamed mode (default: the whole body in one chunk). */
  chunk?: number
  /** Stop the exchange here: cancel the stream or half-close it (default cancel). */
  stopAt?: 'before-body' | 'after-pick' | 'mid-response' | 'no-response-path' | undefined
  stop?: 'cancel' | 'half-close'
  /** What the gateway reports as served (default: the destination's first endpoint). */
  served?: string | null
  /** Called before the stream is stopped at `stopAt` (a test waits there for the picker to see the stream). */
  beforeStop?: () => Promise<void>
}

export interface ChatResult {
  /** The picker answered the client itself. */
  immediate?: { status: number; body: string; headers: Record<string, string> }
  /** The destination header's value and the dynamic metadata's. */
  header?: string
  metadata?: string
  /** The request headers the picker set and removed (Envoy applies them to the request it sends upstream, as this gateway does). */
  setHeaders?: Record<string, string>
  removeHeaders?: string[]
  /** The body the picker handed back (streamed chunks joined), when it did. */
  bodyBack?: Buffer
  /** The upstream's answer, as it went back through the stream. */
  status?: number
  response?: string
  stream: GatewayStream
}

function immediateOf(m: Msg): NonNullable<ChatResult['immediate']> {
  const r = m.immediate_response
  const headers: Record<string, string> = {}
  for (const o of r.headers?.set_headers ?? []) headers[o.header.key] = Buffer.from(o.header.raw_value).toString()
  // proto-loader gives enums as names (envoy.type.v3.StatusCode's are reason phrases).
  const code = typeof r.status.code === 'number' ? r.status.code : protos().root.lookupEnum('envoy.type.v3.StatusCode').values[r.status.code as string]!
  return { status: code, body: Buffer.from(r.body).toString(), headers }
}

function destinationOf(m: Msg, phase: 'request_headers' | 'request_body'): { header?: string; metadata?: string; set: Record<string, string>; remove: string[] } {
  const mutation = m[phase]?.response?.header_mutation
  const set: Record<string, string> = {}
  for (const o of mutation?.set_headers ?? []) set[o.header.key] = Buffer.from(o.header.raw_value).toString()
  const md = m.dynamic_metadata?.fields?.[LB_NAMESPACE]?.structValue?.fields?.[DESTINATION]?.stringValue
  return { ...(set[DESTINATION] !== undefined && { header: set[DESTINATION] }), ...(md !== undefined && { metadata: md }), set, remove: mutation?.remove_headers ?? [] }
}

/** The SHA-256 fingerprint of the certificate a TLS server at host:port presents (ALPN h2). */
export function servedFingerprint(address: string): Promise<string> {
  const i = address.lastIndexOf(':')
  return new Promise((resolve, reject) => {
    const s = connect({ host: address.slice(0, i), port: Number(address.slice(i + 1)), ALPNProtocols: ['h2'], rejectUnauthorized: false, servername: 'localhost' }, () => {
      const fp = s.getPeerX509Certificate()?.fingerprint256
      s.destroy()
      fp === undefined ? reject(new Error('no peer certificate')) : resolve(fp)
    })
    s.once('error', reject)
  })
}

/** TLS trusting this certificate (PEM) only, its names checked as a client would. */
export const tlsTrusting = (cert: string): ChannelCredentials => credentials.createSsl(Buffer.from(cert))

/** TLS without verifying the certificate: what gateways configure for the picker (insecureSkipVerify). */
export const tlsSkipVerify = (): ChannelCredentials => credentials.createSsl(null, null, null, { rejectUnauthorized: false, checkServerIdentity: () => undefined })

export class TestGateway {
  readonly #client: Msg
  readonly #health: Msg

  constructor(
    address: string,
    readonly mode: 'streamed' | 'buffered' = 'streamed',
    /** Plaintext unless given (tlsTrusting, tlsSkipVerify). */
    creds: ChannelCredentials = credentials.createInsecure(),
  ) {
    const Proc = externalProcessor()
    const Health = healthService()
    this.#client = new Proc(address, creds)
    this.#health = new Health(address, creds)
  }

  open(): GatewayStream {
    return new GatewayStream(this.#client.Process())
  }

  /** Health/Check's status name, or the gRPC error code's name when it fails. */
  health(service: string): Promise<string> {
    return new Promise((resolve) => {
      this.#health.Check({ service }, (err: ServiceError | null, r: Msg) => resolve(err ? `error ${err.code}` : r.status))
    })
  }

  /** Health/Watch: the statuses it reports, as they come. */
  watch(service: string): { statuses: string[]; cancel(): void } {
    const call = this.#health.Watch({ service })
    const statuses: string[] = []
    call.on('data', (r: Msg) => statuses.push(r.status))
    call.on('error', () => undefined)
    return { statuses, cancel: () => call.cancel() }
  }

  close(): void {
    this.#client.close()
    this.#health.close()
  }

  /** One request through the picker and on to the endpoint it names, as Envoy would send it. */
  async chat(o: ChatOptions): Promise<ChatResult> {
    const s = this.open()
    const body = Buffer.isBuffer(o.body) ? o.body : Buffer.from(o.body)
    const path = o.path ?? '/v1/chat/completions'
    const stop = async () => {
      await o.beforeStop?.()
      if (o.stop === 'half-close') s.halfClose()
      else s.cancel()
    }
    const headers = [header(':method', 'POST'), header(':path', path), header(':authority', 'gateway'), header('content-type', 'application/json'), header('content-length', String(body.length)), ...Object.entries(o.headers ?? {}).map(([k, v]) => header(k, v))]
    s.send({
      request_headers: { headers: { headers }, end_of_stream: body.length === 0 },
      ...(o.subset && { metadata_context: { filter_metadata: { [SUBSET_NAMESPACE]: { fields: { [SUBSET_KEY]: { listValue: { values: o.subset.map((v) => ({ stringValue: v })) } } } } } } }),
    })
    if (o.stopAt === 'before-body') {
      await stop()
      return { stream: s }
    }
    let first: Msg | undefined
    const back: Buffer[] = []
    let phase: 'request_headers' | 'request_body' = 'request_headers'
    if (body.length === 0) first = await s.next()
    else if (this.mode === 'buffered') {
      const h = await s.next()
      if (h?.immediate_response) return { immediate: immediateOf(h), stream: s }
      s.send({ request_body: { body, end_of_stream: true } })
      first = await s.next()
      phase = 'request_body'
    } else {
      const size = o.chunk ?? body.length
      for (let i = 0; i < body.length; i += size) s.send({ request_body: { body: body.subarray(i, i + size), end_of_stream: i + size >= body.length } })
      first = await s.next()
    }
    if (first === undefined) return { stream: s }
    if (first.immediate_response) return { immediate: immediateOf(first), stream: s }
    const { header: h, metadata, set, remove } = destinationOf(first, phase)
    if (this.mode === 'streamed' && body.length > 0) {
      for (;;) {
        const m = await s.next()
        const sr = m?.request_body?.response?.body_mutation?.streamed_response
        if (sr === undefined) throw new Error(`expected a streamed request body chunk, got ${JSON.stringify(m)}`)
        back.push(Buffer.from(sr.body))
        if (sr.end_of_stream) break
      }
    }
    const result: ChatResult = { ...(h !== undefined && { header: h }), ...(metadata !== undefined && { metadata }), setHeaders: set, removeHeaders: remove, stream: s, ...(back.length > 0 && { bodyBack: Buffer.concat(back) }) }
    if (o.stopAt === 'after-pick') {
      await stop()
      return result
    }
    const target = (h ?? '').split(',')[0]!
    // As Envoy does: the request goes upstream with the picker's header mutation applied.
    const upstreamHeaders: Record<string, string> = { 'content-type': 'application/json', ...o.headers }
    for (const name of remove) delete upstreamHeaders[name]
    for (const [k, v] of Object.entries(set)) if (k !== DESTINATION) upstreamHeaders[k] = v
    const up = await request(`http://${target}${path}`, { method: 'POST', body, headers: upstreamHeaders })
    if (o.stopAt === 'no-response-path') {
      await up.body.text()
      await stop()
      return result
    }
    const served = o.served === undefined ? target : o.served
    const metadataContext = served === null ? {} : { metadata_context: { filter_metadata: { [LB_NAMESPACE]: { fields: { [SERVED_KEY]: { stringValue: served } } } } } }
    s.send({ response_headers: { headers: { headers: [header(':status', String(up.statusCode)), header('content-type', String(up.headers['content-type'] ?? ''))] }, end_of_stream: false }, ...metadataContext })
    const rh = await s.next()
    if (rh?.response_headers === undefined) throw new Error(`expected a response_headers answer, got ${JSON.stringify(rh)}`)
    const out: Buffer[] = []
    let sent = 0
    for await (const chunk of up.body) {
      const c = Buffer.from(chunk as Uint8Array)
      s.send({ response_body: { body: c, end_of_stream: false } })
      sent++
      if (o.stopAt === 'mid-response') {
        await stop()
        up.body.destroy()
        return { ...result, status: up.statusCode }
      }
      out.push(await this.#bodyBack(s, c))
    }
    s.send({ response_body: { body: Buffer.alloc(0), end_of_stream: true } })
    out.push(await this.#bodyBack(s, Buffer.alloc(0)))
    void sent
    s.halfClose()
    await s.closed()
    return { ...result, status: up.statusCode, response: Buffer.concat(out).toString() }
  }

  async #bodyBack(s: GatewayStream, sent: Buffer): Promise<Buffer> {
    const m = await s.next()
    if (m?.response_body === undefined) throw new Error(`expected a response_body answer, got ${JSON.stringify(m)}`)
    const sr = m.response_body.response?.body_mutation?.streamed_response
    return sr === undefined ? sent : Buffer.from(sr.body)
  }
}
