// One chat through a running endpoint picker as Envoy's ext_proc filter sends it (request
// headers, the body streamed or buffered), then to the endpoint the picker names and back
// through the stream (response headers and body), for `prefix-router epp-check`. A picker that
// does not answer is told apart: nothing listening, TLS against plaintext or the reverse (a
// TLS handshake is tried to see which the port speaks), or a gRPC port without ext_proc (the
// plaintext health port).
import { credentials, status, type ClientDuplexStream, type ServiceError } from '@grpc/grpc-js'
import { connect as tcpConnect, isIP } from 'node:net'
import { connect as tlsConnect } from 'node:tls'
import { request } from 'undici'
import { PrefixRouterError } from '../core/errors.js'
import { DESTINATION, LB_NAMESPACE, SERVED_KEY } from './messages.js'
import { externalProcessor, protos } from './protos.js'

// proto-loader's messages are untyped.
type Msg = any

export interface CheckOptions {
  /** host:port of the picker's ext_proc port. */
  address: string
  tls: boolean
  mode: 'streamed' | 'buffered'
  path: string
  body: Buffer
  /** The whole exchange, the endpoint's answer included, must end within this. */
  timeoutMs: number
}

export interface CheckResult {
  /** The picker answered the client itself (a refusal, no instance up). */
  immediate?: { status: number; body: string }
  /** The destination header's value and the dynamic metadata's: they must agree. */
  header?: string
  metadata?: string
  /** The endpoint's answer, as it came back through the stream. */
  status?: number
  response?: string
}

/** Why the check could not be made, in words an operator acts on. */
export class CheckFailed extends PrefixRouterError {
  declare readonly code: 'ERR_EPP_CHECK'
  constructor(message: string) {
    super('ERR_EPP_CHECK', message)
    this.name = 'CheckFailed'
  }
}

const header = (key: string, value: string) => ({ key, raw_value: Buffer.from(value) })

function splitAddress(address: string): { host: string; port: number } {
  const i = address.lastIndexOf(':')
  return { host: address.slice(0, i).replace(/^\[|\]$/g, ''), port: Number(address.slice(i + 1)) }
}

/**
 * TLS as gateways configure it for the picker: its certificate not verified (a self-signed one
 * by default). An IP address is no TLS server name (RFC 6066; Node warns, DEP0123), and grpc-js
 * sends the host as one: for an address, the name sent is `localhost`, which the picker's
 * self-signed certificate carries.
 */
function channel(o: CheckOptions): { creds: ReturnType<typeof credentials.createInsecure>; options: Record<string, string> } {
  if (!o.tls) return { creds: credentials.createInsecure(), options: {} }
  const creds = credentials.createSsl(null, null, null, { rejectUnauthorized: false, checkServerIdentity: () => undefined })
  return { creds, options: isIP(splitAddress(o.address).host) === 0 ? {} : { 'grpc.ssl_target_name_override': 'localhost' } }
}

/** Answers of one stream, in order; undefined once it ended. */
class Answers {
  readonly #queue: Msg[] = []
  #waiting: (() => void) | undefined
  ended = false
  error: ServiceError | undefined

  constructor(call: ClientDuplexStream<Msg, Msg>) {
    const wake = () => {
      this.#waiting?.()
      this.#waiting = undefined
    }
    call.on('data', (m: Msg) => {
      this.#queue.push(m)
      wake()
    })
    call.on('end', () => {
      this.ended = true
      wake()
    })
    call.on('error', (e: ServiceError) => {
      this.error = e
      this.ended = true
      wake()
    })
  }

  async next(): Promise<Msg | undefined> {
    while (this.#queue.length === 0) {
      if (this.ended) return undefined
      await new Promise<void>((r) => (this.#waiting = r))
    }
    return this.#queue.shift()
  }
}

export async function check(o: CheckOptions): Promise<CheckResult> {
  const { creds, options } = channel(o)
  const Proc = externalProcessor()
  const client = new Proc(o.address, creds, options) as unknown as Msg
  const call: ClientDuplexStream<Msg, Msg> = client.Process({ deadline: Date.now() + o.timeoutMs })
  const answers = new Answers(call)
  try {
    const first = await ask(o, call, answers)
    if (first === undefined) throw await noAnswer(o, answers.error)
    return await respond(o, call, answers, first)
  } finally {
    // A check that failed half-way leaves the stream open: reset, it does not hold the process to its deadline.
    if (!answers.ended) call.cancel()
    client.close()
  }
}

/** Sends the request; resolves with the picker's answer to it (the pick), or undefined when none came. */
async function ask(o: CheckOptions, call: ClientDuplexStream<Msg, Msg>, answers: Answers): Promise<{ m: Msg; phase: 'request_headers' | 'request_body' } | undefined> {
  const headers = [header(':method', 'POST'), header(':path', o.path), header(':authority', 'gateway'), header('content-type', 'application/json'), header('content-length', String(o.body.length))]
  call.write({ request_headers: { headers: { headers }, end_of_stream: false } })
  if (o.mode === 'buffered') {
    // The picker answers the headers first (continue, or a refusal), then picks on the body.
    const h = await answers.next()
    if (h === undefined || h.immediate_response) return h && { m: h, phase: 'request_headers' }
    call.write({ request_body: { body: o.body, end_of_stream: true } })
    const m = await answers.next()
    return m && { m, phase: 'request_body' }
  }
  call.write({ request_body: { body: o.body, end_of_stream: true } })
  const m = await answers.next()
  return m && { m, phase: 'request_headers' }
}

async function respond(o: CheckOptions, call: ClientDuplexStream<Msg, Msg>, answers: Answers, first: { m: Msg; phase: 'request_headers' | 'request_body' }): Promise<CheckResult> {
  if (first.m.immediate_response) {
    const r = first.m.immediate_response
    // proto-loader gives enums as names (envoy.type.v3.StatusCode's are reason phrases).
    const code = typeof r.status.code === 'number' ? r.status.code : protos().root.lookupEnum('envoy.type.v3.StatusCode').values[r.status.code as string]!
    call.end()
    return { immediate: { status: code, body: Buffer.from(r.body).toString() } }
  }
  const set: Msg[] = first.m[first.phase]?.response?.header_mutation?.set_headers ?? []
  const h = set.find((x) => x.header.key === DESTINATION)
  const result: CheckResult = {
    ...(h && { header: Buffer.from(h.header.raw_value).toString() }),
    ...(first.m.dynamic_metadata?.fields?.[LB_NAMESPACE]?.structValue?.fields?.[DESTINATION]?.stringValue !== undefined && { metadata: first.m.dynamic_metadata.fields[LB_NAMESPACE].structValue.fields[DESTINATION].stringValue as string }),
  }
  if (o.mode === 'streamed') {
    // In FULL_DUPLEX_STREAMED the picker hands the body back, chunk by chunk, to its end.
    for (;;) {
      const sr = (await answers.next())?.request_body?.response?.body_mutation?.streamed_response
      if (sr === undefined) throw new CheckFailed(`the picker did not hand the request body back (streamed mode): is it running with --body-mode buffered? Use --body-mode buffered here too`)
      if (sr.end_of_stream) break
    }
  }
  const target = (result.header ?? result.metadata ?? '').split(',')[0]!
  if (target === '') throw new CheckFailed('the picker answered without a destination (no x-gateway-destination-endpoint header nor metadata)')
  let up
  try {
    up = await forwardTo(target, o)
  } catch (err) {
    throw new CheckFailed(`the picker chose ${target}, which does not answer: ${(err as Error).message}`)
  }
  const served = { metadata_context: { filter_metadata: { [LB_NAMESPACE]: { fields: { [SERVED_KEY]: { stringValue: target } } } } } }
  call.write({ response_headers: { headers: { headers: [header(':status', String(up.status)), header('content-type', up.type)] }, end_of_stream: false }, ...served })
  if ((await answers.next())?.response_headers === undefined) throw new CheckFailed('the picker did not answer the response headers')
  call.write({ response_body: { body: up.body, end_of_stream: true } })
  const back = (await answers.next())?.response_body
  if (back === undefined) throw new CheckFailed('the picker did not answer the response body')
  const sr = back.response?.body_mutation?.streamed_response
  call.end()
  return { ...result, status: up.status, response: (sr === undefined ? up.body : Buffer.from(sr.body)).toString() }
}

async function forwardTo(target: string, o: CheckOptions): Promise<{ status: number; type: string; body: Buffer }> {
  const r = await request(`http://${target}${o.path}`, { method: 'POST', body: o.body, headers: { 'content-type': 'application/json' }, headersTimeout: o.timeoutMs, bodyTimeout: o.timeoutMs })
  return { status: r.statusCode, type: String(r.headers['content-type'] ?? ''), body: Buffer.from(await r.body.arrayBuffer()) }
}

/** Why the picker gave no answer: what the port is, found by connecting to it. */
async function noAnswer(o: CheckOptions, err: ServiceError | undefined): Promise<CheckFailed> {
  const why = err?.details ?? err?.message ?? 'the stream ended'
  if (err?.code === status.DEADLINE_EXCEEDED) {
    // A picker in streamed mode answers nothing until the body comes, which a buffered gateway sends after the headers' answer.
    const hint = o.mode === 'buffered' ? ': in buffered mode the picker answers the headers first; one running with --body-mode streamed waits for the body: try --body-mode streamed' : ''
    return new CheckFailed(`no answer from the picker at ${o.address} within ${o.timeoutMs} ms${hint}`)
  }
  if (err?.code === status.UNIMPLEMENTED) {
    return new CheckFailed(`${o.address} speaks gRPC but not ext_proc: the picker's health port? ext_proc is on its --grpc-port (default 9002)`)
  }
  const speaks = await spoken(o.address, Math.min(o.timeoutMs, 5000))
  if (speaks === 'nothing') return new CheckFailed(`nothing listens at ${o.address} (connection refused)`)
  if (speaks === 'tls' && !o.tls) return new CheckFailed(`the picker at ${o.address} speaks TLS (epp's default), not plaintext: use --tls on`)
  if (speaks === 'plaintext' && o.tls) return new CheckFailed(`the picker at ${o.address} speaks plaintext (epp --grpc-tls off), not TLS: use --tls off`)
  return new CheckFailed(`no answer from the picker at ${o.address}: ${why}`)
}

/** What the port at `address` speaks: a TLS handshake completes, or it does not, or nothing listens. */
function spoken(address: string, timeoutMs: number): Promise<'tls' | 'plaintext' | 'nothing' | 'unknown'> {
  const { host, port } = splitAddress(address)
  return new Promise((resolve) => {
    const tcp = tcpConnect({ host, port })
    const timer = setTimeout(() => done('unknown'), timeoutMs)
    const done = (what: 'tls' | 'plaintext' | 'nothing' | 'unknown') => {
      clearTimeout(timer)
      tcp.destroy()
      resolve(what)
    }
    tcp.once('error', (e: NodeJS.ErrnoException) => done(e.code === 'ECONNREFUSED' ? 'nothing' : 'unknown'))
    tcp.once('connect', () => {
      tcp.removeAllListeners('error')
      const s = tlsConnect({ socket: tcp, ALPNProtocols: ['h2'], rejectUnauthorized: false, ...(isIP(host) === 0 && { servername: host }) })
      s.once('secureConnect', () => done('tls'))
      s.once('error', () => done('plaintext'))
    })
  })
}
