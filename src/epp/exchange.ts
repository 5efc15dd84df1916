// One ext_proc stream: one request the gateway asks about, from its headers to the end of its
// response. The request's body is gathered (under the body limit), its routing key read as
// serve reads it, the instance picked and named in a header and in dynamic metadata, and the
// body handed back; the response path's first message is the request's first token, and the
// stream's end, however it comes, releases the lease once.
import type { ServerDuplexStream } from '@grpc/grpc-js'
import type { Logger } from 'pino'
import type { Config } from '../config/config.js'
import type { ExactTokens, Lease } from '../core/router.js'
import { TENANT_HEADER } from '../core/key/index.js'
import { RequestError } from '../core/errors.js'
import { echo } from '../core/echo.js'
import { decisionOf } from '../core/strategies.js'
import type { Endpoint, Pick } from '../fleet/endpoint.js'
import type { Instance } from '../fleet/instance.js'
import type { RouterMetrics } from '../metrics/router-metrics.js'
import { tenantHash } from '../request/tenant-hash.js'
import type { RequestKeying } from '../request/keying.js'
import { openAILimits, type RequestKey } from '../request/request-key.js'
import { checkDeclaredLength, checkMethod, endpointOf } from '../request/admission.js'
import { bodyTimeout, notFound, pickerFailed, tooLarge, toProxyError, type ProxyError } from '../request/errors.js'
import { REQUEST_ID_HEADER, requestIdOf, type RequestId } from '../request/request-id.js'
import { openAIBodyOf } from '../request/openai-body.js'
import { matchRoute } from '../request/routes.js'
import {
  bytesOf,
  continueResponse,
  destinationResponse,
  headersOf,
  immediateResponse,
  servedOf,
  streamedBody,
  subsetHint,
  type HttpBody,
  type HttpHeaders,
  type ProcessingRequest,
  type ProcessingResponse,
} from './messages.js'
import type { Encoded } from './codec.js'
import type { EppMetrics } from './metrics.js'
import { hostPort, pickIn } from './subset.js'
import { endpointPicker } from '../schedule/endpoint-picker.js'
import { APPROX_BYTES_PER_TOKEN, disaggregates, schedule } from '../schedule/index.js'

/**
 * How the gateway's ext_proc filter sends bodies (its processing_mode): `streamed` is
 * FULL_DUPLEX_STREAMED (the protocol's required mode: chunks come without waiting, and go back
 * as streamed_response chunks once the headers are answered); `buffered` is BUFFERED (the
 * headers are answered at once, the body comes whole and is answered with the destination).
 */
export type BodyMode = 'streamed' | 'buffered'

export interface PickerCore {
  readonly config: Config
  readonly log: Logger
  readonly metrics: RouterMetrics
  readonly eppMetrics: EppMetrics
  readonly bodyMode: BodyMode
  /** A request's key and tokens, as serve makes them. */
  readonly keying: RequestKeying
  endpoint(name: string | undefined): Endpoint | undefined
}

type Call = ServerDuplexStream<ProcessingRequest, ProcessingResponse | Encoded>

/** How a stream ended, for the metrics and the log line. */
type Ended = 'response' | 'cut' | 'immediate'

export class Exchange {
  readonly started = performance.now()
  #headers: Record<string, string> = {}
  /** The request id as serve checks it: the gateway's x-request-id when usable, else one of ours, set on the request it sends upstream. */
  #rid: RequestId | undefined
  #subset: string[] | undefined
  #chunks: Buffer[] = []
  #bytes = 0
  #ep: Endpoint | undefined
  #api: Parameters<typeof openAIBodyOf>[0] | undefined
  /** Set once the instance is picked; released (once) when the stream ends. */
  lease: Lease | undefined
  /** A disaggregated request's prefill pod: its lease ends with the first response message (the prefill is over then), or with the stream. */
  #prefillLease: Lease | undefined
  #prefiller: string | undefined
  #prefillInstance: Instance | undefined
  #instance: Instance | undefined
  #picked = ''
  #decision = ''
  #model: string | undefined
  #tenant: string | undefined
  #status = 0
  #served: string | undefined
  #firstAt: number | undefined
  #answered = false
  #ended: Ended | undefined
  /**
   * Messages are handled one after another, at once while nothing waits; a pick that waits (a
   * parse in a worker, the exact view's tokens) holds the later ones behind it until it is done.
   * No promise per message otherwise: there are ten or so messages to a request.
   */
  #tail: Promise<void> | undefined
  /**
   * serve's body deadline (limits.bodyTimeoutMs, 0: none), from the stream's opening to the
   * end of its request body: a stream that sends its headers and never a body would otherwise
   * hold its slot (and its memory) until the gateway gave up on it, which may be never.
   */
  #bodyTimer: NodeJS.Timeout | undefined

  constructor(
    readonly core: PickerCore,
    readonly call: Call,
    readonly onEnd: (x: Exchange) => void,
  ) {
    const ms = core.config.limits.bodyTimeoutMs
    if (ms > 0) this.#bodyTimer = setTimeout(bodyLate, ms, this, ms).unref()
    call.on('data', (m: ProcessingRequest) => this.#run(() => this.#handle(m)))
    call.on('end', () => {
      // The gateway half-closed: nothing more will come. What it sent before is answered first.
      this.#run(() => {
        this.#finish('cut')
        if (!call.writableEnded) call.end()
      })
    })
    call.on('error', () => this.#finish('cut'))
    call.on('cancelled', () => this.#finish('cut'))
    call.on('close', () => this.#finish('cut'))
  }

  /** Runs `step` now when nothing waits, else after what does; a step that returns a promise holds the next ones. */
  #run(step: () => Promise<void> | void): void {
    if (this.#tail !== undefined) return this.#hold(this.#tail.then(step))
    let r: Promise<void> | void
    try {
      r = step()
    } catch (err) {
      return this.#fail(err)
    }
    if (r !== undefined) this.#hold(r)
  }

  #hold(p: Promise<void>): void {
    const t: Promise<void> = p
      .catch((err: unknown) => this.#fail(err))
      .then(() => {
        if (this.#tail === t) this.#tail = undefined
      })
    this.#tail = t
  }

  /** Whether the stream has ended (its lease, if any, released). */
  get ended(): boolean {
    return this.#ended !== undefined
  }

  #send(r: ProcessingResponse | Encoded): void {
    if (this.#ended !== undefined || this.call.cancelled || this.call.destroyed || this.call.writableEnded) return
    this.call.write(r)
  }

  #handle(m: ProcessingRequest): Promise<void> | undefined {
    if (this.#ended !== undefined || this.#answered) return undefined
    switch (m.request) {
      case 'request_headers':
        return this.#requestHeaders(m.request_headers ?? {}, m)
      case 'request_body':
        return this.#requestBody(m.request_body ?? {})
      case 'response_headers':
        this.#responseHeaders(m.response_headers ?? {}, m)
        return undefined
      case 'response_body':
        this.#responseBody(m.response_body ?? {}, m)
        return undefined
      case 'request_trailers':
      case 'response_trailers':
        this.#send(continueResponse(m.request))
        if (m.request === 'response_trailers') this.#finish('response')
        return undefined
    }
    return undefined
  }

  #requestHeaders(h: HttpHeaders, m: ProcessingRequest): Promise<void> | undefined {
    this.#headers = headersOf(h)
    this.#rid = requestIdOf(this.#headers[REQUEST_ID_HEADER])
    this.#subset = subsetHint(m.metadata_context)
    // Draining takes requests still (readiness is what turns the gateway away), until the port closes.
    const path = this.#headers[':path'] ?? '/'
    const method = this.#headers[':method'] ?? 'POST'
    const matched = matchRoute(path)
    if (matched === undefined || matched.route.kind !== 'openai') throw notFound('not_found', `the endpoint picker routes OpenAI bodies (POST /v1/chat/completions, /v1/completions, ...); no route for ${echo(method)} ${echo(path.split('?')[0]!)}`)
    checkMethod(matched, method)
    this.#ep = endpointOf(this.core, matched.route.endpoint)
    this.#api = matched.route.api
    checkDeclaredLength(this.#headers['content-length'], this.core.config.limits.maxBodyBytes)
    // No body at all: read as an empty one, which is refused as serve refuses it.
    if (h.end_of_stream) return this.#pick('request_headers')
    // Buffered: the gateway waits for this answer before it sends the body.
    if (this.core.bodyMode === 'buffered') this.#send(continueResponse('request_headers'))
    return undefined
  }

  #requestBody(b: HttpBody): Promise<void> | undefined {
    if (this.#ep === undefined) return undefined
    // A view into the received message (grpc-js allocates one per message), kept until the pick.
    const chunk = bytesOf(b.body)
    this.#bytes += chunk.length
    const limit = this.core.config.limits.maxBodyBytes
    if (this.#bytes > limit) throw tooLarge(limit)
    this.#chunks.push(chunk)
    if (!b.end_of_stream) return undefined
    const picking = this.#pick(this.core.bodyMode === 'buffered' ? 'request_body' : 'request_headers')
    if (picking === undefined) return this.#handBack()
    return picking.then(() => this.#handBack())
  }

  /** Full duplex: the body goes back as it came, after the headers' answer. */
  #handBack(): undefined {
    if (this.#answered || this.core.bodyMode === 'buffered') return undefined
    const chunks = this.#chunks
    this.#chunks = []
    for (let i = 0; i < chunks.length; i++) this.#send(streamedBody('request_body', chunks[i]!, i === chunks.length - 1))
    return undefined
  }

  /** Reads the whole body's routing key, picks, and answers `phase` with the destination; undefined when nothing had to wait. */
  #pick(phase: 'request_headers' | 'request_body'): Promise<void> | undefined {
    clearTimeout(this.#bodyTimer)
    const ep = this.#ep!
    const { core } = this
    const raw = this.#chunks.length === 1 ? this.#chunks[0]! : Buffer.concat(this.#chunks)
    const tenantHeader = this.#headers[TENANT_HEADER]
    const read = openAIBodyOf(this.#api!, raw, openAILimits(core.config, ep.routing, tenantHeader))
    if (read instanceof Promise) return read.then((r) => this.#keyRead(phase, raw, tenantHeader, r))
    return this.#keyRead(phase, raw, tenantHeader, read)
  }

  #keyRead(phase: 'request_headers' | 'request_body', raw: Buffer, tenantHeader: string | undefined, read: Awaited<ReturnType<typeof openAIBodyOf>>): Promise<void> | undefined {
    const ep = this.#ep!
    const { core } = this
    const k = core.keying.key(core.config, core.log, ep, tenantHeader, read)
    this.#model = k.model
    this.#tenant = k.tenant
    const tokens = core.keying.tokens(ep, this.#api!, raw, k.model)
    if (tokens === undefined) return this.#choose(phase, k, undefined, raw.length)
    return tokens.then((exact) => this.#choose(phase, k, exact, raw.length))
  }

  /**
   * The instance to name: a disaggregated endpoint's schedule (the decode pod as the
   * destination; the prefill pod, when the request gets a prefill leg, for the decode pod's
   * sidecar), else the strategy's pick inside the gateway's subset.
   */
  #scheduled(ep: Endpoint, k: RequestKey, exact: ExactTokens | undefined, bytes: number): Pick {
    if (!ep.disaggregated || !disaggregates(this.#api) || this.#subset !== undefined) return pickIn(ep, k, this.#subset, exact)
    const view = { key: k.key, tenant: k.tenant, model: k.model, anchor: k.anchor, exact, promptTokens: exact?.ids.length ?? Math.ceil(bytes / APPROX_BYTES_PER_TOKEN) }
    const s = schedule(endpointPicker(ep), view, ep.disaggregation)
    this.core.metrics.pd.requests.inc({ endpoint: ep.name, path: s.profile === 'pd' ? 'disaggregated' : s.reason })
    if (s.profile === 'single') return s.target
    this.#prefillLease = s.prefill.lease
    this.#prefiller = hostPort(s.prefill.instance)
    this.#prefillInstance = s.prefill.instance
    return s.decode
  }

  #choose(phase: 'request_headers' | 'request_body', k: RequestKey, exact: ExactTokens | undefined, bytes: number): undefined {
    const ep = this.#ep!
    const { core } = this
    // The stream may have ended while the body was parsed or tokenized: then there is nothing to lease for.
    if (this.#ended !== undefined) return undefined
    const t0 = performance.now()
    const pick = this.#scheduled(ep, k, exact, bytes)
    core.metrics.decision.observe([ep.routing.strategy], (performance.now() - t0) / 1000)
    if (pick.lease.overflow) core.metrics.overflow.inc({ instance: pick.instance.id })
    this.lease = pick.lease
    this.#instance = pick.instance
    this.#picked = hostPort(pick.instance)
    this.#decision = decisionOf(ep.routing.strategy, pick.lease.overflow)
    // The strategies give one instance, no fallback list: the header and the metadata name it alone.
    // An unusable id (too long, not printable ASCII) is replaced upstream as serve replaces it, so the instance's log and the picker's name the same one.
    this.#send(destinationResponse(phase, this.#picked, this.#prefiller, this.#rid?.replaced ? this.#rid.id : undefined))
    return undefined
  }

  #firstResponse(m: ProcessingRequest): void {
    if (this.#firstAt === undefined) {
      this.#firstAt = performance.now()
      // The instance has answered: longest_prefix stops counting the prompt as queued there. A
      // prefill leg (run by the decode pod's sidecar) is over by then: its lease ends.
      this.lease?.firstToken()
      this.#prefillLease?.release()
      if (this.#instance !== undefined) this.core.metrics.ttfb.observe([this.#instance.id], (this.#firstAt - this.started) / 1000)
    }
    // Looked for on every response message until one carries it.
    if (this.#served !== undefined) return
    this.#served = servedOf(m.metadata_context)
    if (this.#served !== undefined && this.#served !== this.#picked && this.#ep !== undefined) {
      this.core.eppMetrics.servedElsewhere.inc({ endpoint: this.#ep.name })
      this.core.log.warn({ endpoint: this.#ep.name, picked: this.#picked, served: echo(this.#served) }, 'the gateway served the request elsewhere than the endpoint picked')
    }
  }

  #responseHeaders(h: HttpHeaders, m: ProcessingRequest): void {
    this.#firstResponse(m)
    const status = Number(headersOf(h)[':status'])
    if (Number.isInteger(status)) this.#status = status
    this.#send(continueResponse('response_headers'))
    if (h.end_of_stream) this.#finish('response')
  }

  #responseBody(b: HttpBody, m: ProcessingRequest): void {
    this.#firstResponse(m)
    const end = b.end_of_stream === true
    if (this.core.bodyMode === 'streamed') this.#send(streamedBody('response_body', bytesOf(b.body), end))
    else this.#send(continueResponse('response_body'))
    if (end) this.#finish('response')
  }

  /** The body deadline passed before the body's end: 408 request_timeout, as serve answers it. */
  bodyLate(ms: number): void {
    if (this.#ended !== undefined || this.#answered) return
    this.#fail(bodyTimeout(ms))
  }

  /** A refusal (RequestError) becomes the immediate answer; anything else is logged and answered 500. */
  #fail(err: unknown): void {
    if (this.#ended !== undefined) return
    let e: ProxyError
    if (err instanceof RequestError) e = toProxyError(err)
    else {
      this.core.log.error({ err }, 'endpoint picker: request failed')
      e = pickerFailed()
    }
    this.#status = e.status
    this.#answered = true
    this.#send(immediateResponse(e))
    this.#finish('immediate')
    if (!this.call.writableEnded) this.call.end()
  }

  #finish(how: Ended): void {
    if (this.#ended !== undefined) return
    this.#ended = how
    clearTimeout(this.#bodyTimer)
    this.lease?.release()
    this.#prefillLease?.release()
    const { core } = this
    core.eppMetrics.ended.inc({ how })
    const status = how === 'cut' && this.#status === 0 ? 499 : this.#status
    const ep = this.#ep?.name ?? ''
    core.metrics.requests.inc([ep, this.#instance?.id ?? '', this.#ep?.routing.strategy ?? '', status])
    const seconds = (performance.now() - this.started) / 1000
    if (ep) core.metrics.duration.observe([ep, status], seconds)
    if (core.config.log.accessLog && core.log.isLevelEnabled('info')) {
      // The gateway's values as serve logs a client's: an unusable request id replaced (and said
      // so), a method and path cut to echo()'s length.
      const rid = this.#rid ?? requestIdOf(this.#headers[REQUEST_ID_HEADER])
      const method = this.#headers[':method']
      const path = this.#headers[':path']
      core.log.info(
        {
          requestId: rid.id,
          ...(rid.replaced && { requestIdReplaced: true }),
          method: method === undefined ? undefined : echo(method),
          path: path === undefined ? undefined : echo(path.split('?')[0]!),
          endpoint: ep || undefined,
          instance: this.#instance?.id,
          picked: this.#picked || undefined,
          prefill: this.#prefillInstance?.id,
          served: this.#served,
          decision: this.#decision || undefined,
          model: this.#model,
          tenant: this.#tenant === undefined ? undefined : tenantHash(this.#tenant),
          status,
          ended: how,
          ms: Math.round(seconds * 1000 * 10) / 10,
        },
        'epp request',
      )
    }
    this.onEnd(this)
  }
}

// The body deadline's callback, shared by every stream (no closure per stream).
function bodyLate(x: Exchange, ms: number): void {
  x.bodyLate(ms)
}
