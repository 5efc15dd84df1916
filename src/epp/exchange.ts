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
import type { Endpoint } from '../fleet/endpoint.js'
import type { Instance } from '../fleet/instance.js'
import type { ProxyMetrics } from '../metrics/proxy-metrics.js'
import { tenantHash } from '../proxy/access-log.js'
import { chatKey, openAILimits } from '../proxy/chat-key.js'
import { methodNotAllowed, notFound, pickerFailed, tooLarge, toProxyError, type ProxyError } from '../proxy/errors.js'
import { openAIBodyOf } from '../proxy/openai-body.js'
import { matchRoute } from '../proxy/routes.js'
import { exactTokens } from '../tokens/request-tokens.js'
import {
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
import type { EppMetrics } from './metrics.js'
import { hostPort, pickIn } from './subset.js'

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
  readonly metrics: ProxyMetrics
  readonly eppMetrics: EppMetrics
  readonly bodyMode: BodyMode
  endpoint(name: string | undefined): Endpoint | undefined
}

type Call = ServerDuplexStream<ProcessingRequest, ProcessingResponse>

/** How a stream ended, for the metrics and the log line. */
type Ended = 'response' | 'cut' | 'immediate'

export class Exchange {
  readonly started = performance.now()
  #headers: Record<string, string> = {}
  #subset: string[] | undefined
  #chunks: Buffer[] = []
  #bytes = 0
  #ep: Endpoint | undefined
  #api: Parameters<typeof openAIBodyOf>[0] | undefined
  /** Set once the instance is picked; released (once) when the stream ends. */
  lease: Lease | undefined
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
  /** Messages are handled one after another: a pick may wait (a parse in a worker, the exact view's tokens). */
  #chain: Promise<void> = Promise.resolve()

  constructor(
    readonly core: PickerCore,
    readonly call: Call,
    readonly onEnd: (x: Exchange) => void,
  ) {
    call.on('data', (m: ProcessingRequest) => {
      this.#chain = this.#chain.then(() => this.#handle(m)).catch((err: unknown) => this.#fail(err))
    })
    call.on('end', () => {
      // The gateway half-closed: nothing more will come. What it sent before is answered first.
      this.#chain = this.#chain.then(() => {
        this.#finish('cut')
        if (!call.writableEnded) call.end()
      })
    })
    call.on('error', () => this.#finish('cut'))
    call.on('cancelled', () => this.#finish('cut'))
    call.on('close', () => this.#finish('cut'))
  }

  /** Whether the stream has ended (its lease, if any, released). */
  get ended(): boolean {
    return this.#ended !== undefined
  }

  #send(r: ProcessingResponse): void {
    if (this.#ended !== undefined || this.call.cancelled || this.call.destroyed || this.call.writableEnded) return
    this.call.write(r)
  }

  async #handle(m: ProcessingRequest): Promise<void> {
    if (this.#ended !== undefined || this.#answered) return
    switch (m.request) {
      case 'request_headers':
        return this.#requestHeaders(m.request_headers ?? {}, m)
      case 'request_body':
        return this.#requestBody(m.request_body ?? {})
      case 'response_headers':
        return this.#responseHeaders(m.response_headers ?? {}, m)
      case 'response_body':
        return this.#responseBody(m.response_body ?? {}, m)
      case 'request_trailers':
      case 'response_trailers':
        this.#send(continueResponse(m.request))
        if (m.request === 'response_trailers') this.#finish('response')
        return
    }
  }

  #requestHeaders(h: HttpHeaders, m: ProcessingRequest): Promise<void> | undefined {
    this.#headers = headersOf(h)
    this.#subset = subsetHint(m.metadata_context)
    // Draining takes requests still (readiness is what turns the gateway away), until the port closes.
    const path = this.#headers[':path'] ?? '/'
    const method = this.#headers[':method'] ?? 'POST'
    const matched = matchRoute(path)
    if (matched === undefined || matched.route.kind !== 'openai') throw notFound('not_found', `the endpoint picker routes OpenAI bodies (POST /v1/chat/completions, /v1/completions, ...); no route for ${method} ${path.split('?')[0]}`)
    if (method !== matched.method) throw methodNotAllowed(matched.method)
    const ep = this.core.endpoint(matched.route.endpoint)
    if (ep === undefined) throw notFound('endpoint_not_found', `no endpoint named '${matched.route.endpoint ?? 'default'}'`)
    this.#ep = ep
    this.#api = matched.route.api
    const limit = this.core.config.limits.maxBodyBytes
    const length = this.#headers['content-length']
    if (length !== undefined && Number(length) > limit) throw tooLarge(limit)
    // No body at all: read as an empty one, which is refused as serve refuses it.
    if (h.end_of_stream) return this.#pick('request_headers')
    // Buffered: the gateway waits for this answer before it sends the body.
    if (this.core.bodyMode === 'buffered') this.#send(continueResponse('request_headers'))
    return undefined
  }

  async #requestBody(b: HttpBody): Promise<void> {
    if (this.#ep === undefined) return
    const chunk = Buffer.from(b.body ?? [])
    this.#bytes += chunk.length
    const limit = this.core.config.limits.maxBodyBytes
    if (this.#bytes > limit) throw tooLarge(limit)
    this.#chunks.push(chunk)
    if (!b.end_of_stream) return
    await this.#pick(this.core.bodyMode === 'buffered' ? 'request_body' : 'request_headers')
    if (this.#answered || this.core.bodyMode === 'buffered') return
    // Full duplex: the body goes back as it came, after the headers' answer.
    const chunks = this.#chunks
    this.#chunks = []
    for (let i = 0; i < chunks.length; i++) this.#send(streamedBody('request_body', chunks[i]!, i === chunks.length - 1))
  }

  /** Reads the whole body's routing key, picks, and answers `phase` with the destination. */
  async #pick(phase: 'request_headers' | 'request_body'): Promise<void> {
    const ep = this.#ep!
    const { core } = this
    const raw = this.#chunks.length === 1 ? this.#chunks[0]! : Buffer.concat(this.#chunks)
    const tenantHeader = this.#headers[TENANT_HEADER]
    const read = await openAIBodyOf(this.#api!, raw, openAILimits(core.config, ep.routing, tenantHeader))
    const k = chatKey(core.config, core.log, ep.name, tenantHeader, read)
    this.#model = k.model
    this.#tenant = k.tenant
    let exact: ExactTokens | undefined
    if (ep.tokenizer !== undefined) {
      const t0 = performance.now()
      exact = await exactTokens(ep.tokenizer, this.#api!, raw, k.model, ep.isAdapter(k.model), ep.tokenizeTarget(k.model))
      core.metrics.tokenize.observe([exact === undefined ? 'fallback' : 'ok'], (performance.now() - t0) / 1000)
    }
    // The stream may have ended while the body was parsed or tokenized: then there is nothing to lease for.
    if (this.#ended !== undefined) return
    const t0 = performance.now()
    const pick = pickIn(ep, k, this.#subset, exact)
    core.metrics.decision.observe([ep.routing.strategy], (performance.now() - t0) / 1000)
    if (pick.lease.overflow) core.metrics.overflow.inc({ instance: pick.instance.id })
    this.lease = pick.lease
    this.#instance = pick.instance
    this.#picked = hostPort(pick.instance)
    const targeted = ep.routing.strategy === 'prefix_aware' || ep.routing.strategy === 'longest_prefix'
    this.#decision = targeted ? (pick.lease.overflow ? 'overflow' : 'target') : ep.routing.strategy
    // The strategies give one instance, no fallback list: the header and the metadata name it alone.
    this.#send(destinationResponse(phase, this.#picked))
  }

  #firstResponse(m: ProcessingRequest): void {
    if (this.#firstAt === undefined) {
      this.#firstAt = performance.now()
      // The instance has answered: longest_prefix stops counting the prompt as queued there.
      this.lease?.firstToken()
      if (this.#instance !== undefined) this.core.metrics.ttfb.observe([this.#instance.id], (this.#firstAt - this.started) / 1000)
    }
    // Looked for on every response message until one carries it.
    if (this.#served !== undefined) return
    this.#served = servedOf(m.metadata_context)
    if (this.#served !== undefined && this.#served !== this.#picked && this.#ep !== undefined) {
      this.core.eppMetrics.servedElsewhere.inc({ endpoint: this.#ep.name })
      this.core.log.warn({ endpoint: this.#ep.name, picked: this.#picked, served: this.#served }, 'the gateway served the request elsewhere than the endpoint picked')
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
    if (this.core.bodyMode === 'streamed') this.#send(streamedBody('response_body', Buffer.from(b.body ?? []), end))
    else this.#send(continueResponse('response_body'))
    if (end) this.#finish('response')
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
    this.lease?.release()
    const { core } = this
    core.eppMetrics.ended.inc({ how })
    const status = how === 'cut' && this.#status === 0 ? 499 : this.#status
    const ep = this.#ep?.name ?? ''
    core.metrics.requests.inc([ep, this.#instance?.id ?? '', this.#ep?.routing.strategy ?? '', status])
    const seconds = (performance.now() - this.started) / 1000
    if (ep) core.metrics.duration.observe([ep, status], seconds)
    if (core.config.log.accessLog && core.log.isLevelEnabled('info')) {
      core.log.info(
        {
          requestId: this.#headers['x-request-id'],
          method: this.#headers[':method'],
          path: this.#headers[':path']?.split('?')[0],
          endpoint: ep || undefined,
          instance: this.#instance?.id,
          picked: this.#picked || undefined,
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
