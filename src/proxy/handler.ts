// One front request, start to end: route, routing key, pick, forward, release. The lease
// is released in `finally`, so success, upstream error, client abort and timeout all
// return the in-flight count to where it was.
import { exactTokens } from '../tokens/request-tokens.js'
import type { ExactTokens } from '../core/router.js'
import type { OpenAIApi } from '../core/key/openai-key.js'
import type { Logger } from 'pino'
import type { Config } from '../config/config.js'
import type { Endpoint, Pick } from '../fleet/endpoint.js'
import type { Instance } from '../fleet/instance.js'
import type { Span } from '@opentelemetry/api'
import type { ProxyMetrics } from '../metrics/proxy-metrics.js'
import type { Lease } from '../core/router.js'
import { invokeKey, TENANT_HEADER } from '../core/key/index.js'
import { readInvokePrefix, type InvokeBody } from './invoke-body.js'
import { chatKey, openAILimits } from './chat-key.js'
import { logAccess, newOutcome, type Outcome } from './access-log.js'
import type { DecisionRing } from './decisions.js'
import { bodyChunks, bodyLeft, endAfterBody, readWhole, type WholeUse } from './body.js'
import { EventStreamResponse } from './event-stream-response.js'
import { echo } from '../core/echo.js'
import { RequestError } from '../core/errors.js'
import { decisionOf } from '../core/strategies.js'
import { duplicateHost, isConnectError, methodNotAllowed, noHealthyInstance, notFound, ProxyError, shuttingDown, tooLarge, toProxyError, upstreamError, upstreamFailed } from './errors.js'
import { CLIENT_GONE, forward, forwardFresh, resetUnanswered, requestWasSent, UpstreamStatusError, type ClientState, type ForwardRequest } from './forward.js'
import { openAIBodyOf, readOpenAIBody, WHOLE_BODY_BYTES, type OpenAIBody, type OpenAIBodyLimits } from './openai-body.js'
import { repeatsHost } from './host-header.js'
import { REQUEST_ID_HEADER, requestIdOf } from './request-id.js'
import { matchRoute, OPENAI_ROUTES, type Route } from './routes.js'
import { inferenceComponentOf, INFERENCE_COMPONENT_HEADER, VARIANT, VARIANT_HEADER } from './sagemaker-headers.js'
import { ATTR, endSpan, injectInto, NO_SPAN, startChild, startRequestSpan, tracingOff, type RequestSpan } from './tracing.js'
import type { Req, Res } from './types.js'

export interface ProxyCore {
  readonly config: Config
  readonly metrics: ProxyMetrics
  readonly log: Logger
  endpoint(name: string | undefined): Endpoint | undefined
  endpoints(): Iterable<Endpoint>
  /** Proxied requests in flight, and how many of them are on a retry (for the retry budget). */
  readonly traffic: { active: number; retrying: number }
  /** Every front request being handled, so that a shutdown can end what is left. */
  readonly requests: Set<ClientState>
  /** Shutting down: /health and /ping answer 503 so that load balancers stop sending. */
  readonly draining: boolean
  /** The last requests' decisions, for the admin port's status page. */
  readonly decisions: DecisionRing
}

const isH2 = (req: Req) => req.httpVersionMajor === 2

/**
 * The router's own answer, with the headers every answer to the request carries (forward adds
 * them to the instances'). Given `rest`, an answer that closes the connection before the body
 * was read to its end is ended only once the rest is read and thrown away (endAfterBody).
 */
function send(req: Req, res: Res, out: Outcome, status: number, body: string, headers: Record<string, string> = {}, rest?: Config['limits']): void {
  if (res.headersSent) {
    res.destroy()
    return
  }
  const h: Record<string, string> = { 'content-type': 'application/json', ...headers, [REQUEST_ID_HEADER]: out.requestId }
  if (out.sagemaker) h[VARIANT_HEADER] = VARIANT
  // Connection-specific headers are forbidden in HTTP/2 (RFC 9113 section 8.2.2).
  if (isH2(req)) delete h.connection
  if (rest !== undefined && h.connection === 'close' && bodyLeft(req, rest.maxBodyBytes)) {
    h['content-length'] = String(Buffer.byteLength(body))
    res.writeHead(status, h)
    return endAfterBody(req, res, body, rest.maxBodyBytes, rest.bodyTimeoutMs)
  }
  res.writeHead(status, h)
  res.end(body)
}

/**
 * An invocation body declared at most this long is read whole before routing, as a chat body
 * is: one buffer sent upstream (and so retryable) costs less than a stream of its chunks, and
 * waiting for the rest of so few bytes delays nothing. Longer ones are routed on their first
 * bytes and streamed, never held whole.
 */
const WHOLE_INVOKE_BYTES = 64 * 1024

function declaredLength(req: Req): number | undefined {
  const v = req.headers['content-length']
  return v === undefined ? undefined : Number(v)
}

const CLIENT = Symbol('client state')
type Answered = Res & { [CLIENT]?: ClientState }

/** A response closed (Node calls it with the response as `this`): before it ended, the client went away. */
function onClose(this: Answered): void {
  const client = this[CLIENT]!
  if (this.writableEnded || client.shutdown) return
  client.gone = true
  client.abort?.(CLIENT_GONE)
}

export async function handle(core: ProxyCore, req: Req, res: Res): Promise<void> {
  const started = performance.now()
  // 'close' before the response ended means the client went away: stop the upstream request.
  // (A plain object rather than an AbortController, which costs a DOMException per request.)
  const client: ClientState = { gone: false, shutdown: false, abort: undefined }
  // 'close' comes once: `on` spares the wrapper `once` makes for every request, and one
  // listener for all, finding the request's state on the response, spares a closure.
  ;(res as Answered)[CLIENT] = client
  res.on('close', onClose)
  core.requests.add(client)
  const rid = requestIdOf(req.headers[REQUEST_ID_HEADER])
  const out = newOutcome(rid.id, rid.replaced)
  // Every answer carries the request id, added where its headers are written (send, forward)
  // rather than set here: a response with no header set before writeHead skips Node's
  // setHeader pass over every header the instance sent.
  try {
    if (req.httpVersionMajor === 1 && repeatsHost(req.rawHeaders)) throw duplicateHost()
    const m = matchRoute(req.url ?? '/')
    if (m === undefined) throw notFound('not_found', `no route for ${echo(req.method ?? '')} ${echo((req.url ?? '').split('?')[0]!)}`)
    // A path the router does not forward is a 404 whatever the method: Allow would name a route that does not exist.
    if (req.method !== m.method && m.route.kind !== 'unsupported') throw methodNotAllowed(m.method)
    const { route } = m
    const ep = dispatch(core, route, req, res, out)
    // The body is read and the request proxied here rather than in a function of their own:
    // every async function a request goes through costs it a few hundred bytes.
    if (ep === undefined) return
    const routing = ep.routing
    if (route.kind === 'invoke') {
      // Checked before the body is read: a bad header is refused unread.
      const model = inferenceComponentOf(req.headers[INFERENCE_COMPONENT_HEADER])
      const read = await readInvoke(core, routing, req, out)
      out.status = await proxyTo(core, ep, req, route.eventStream ? new EventStreamResponse(res) : res, client, out, invokeOutbound(routing, route, req, read, model))
    } else if (route.kind === 'openai') {
      out.status = await new OpenAIBodyRequest(core, ep, route, req, res, client, out).proxy()
    }
  } catch (err) {
    answerError(core, req, res, client, out, err)
  } finally {
    record(core, req, client, out, started)
  }
}

// The catch and finally of handle, out of it: what an async function holds across its awaits
// is sized by all its locals, temporaries included, and is allocated for every request.
function answerError(core: ProxyCore, req: Req, res: Res, client: ClientState, out: Outcome, err: unknown): void {
  if (client.gone) return void (out.status = 499)
  const e = err instanceof RequestError ? toProxyError(err) : upstreamError(err)
  if (!(err instanceof RequestError)) core.log.error({ err }, 'request failed')
  out.status = e.status
  // A request whose body we refuse unread must not leave the rest on a kept-alive connection;
  // but the rest is read before the connection is closed, so that the answer is not lost, unless
  // the body's time is up already.
  const debug: Record<string, string> = core.config.debugHeaders && out.instance ? { 'x-prefix-router-instance': out.instance, 'x-prefix-router-retries': String(out.retries) } : {}
  const rest = e.status === 408 ? undefined : core.config.limits
  send(req, res, out, e.status, e.body(), e.status === 413 ? { ...e.headers, ...debug, connection: 'close' } : { ...e.headers, ...debug }, rest)
}

// Label values are written into these and read at once: the metrics keep none of them.
const REQUEST_LABELS: [string, string, string, number] = ['', '', '', 0]
const DURATION_LABELS: [string, number] = ['', 0]
const CHECK_LABELS: [string, number] = ['', 0]

function record(core: ProxyCore, req: Req, client: ClientState, out: Outcome, started: number): void {
  core.requests.delete(client)
  const ended = performance.now()
  const seconds = (ended - started) / 1000
  const status = client.gone ? 499 : out.status
  if (out.check !== undefined) {
    CHECK_LABELS[0] = out.check
    CHECK_LABELS[1] = status
    core.metrics.healthChecks.inc(CHECK_LABELS)
  } else {
    const r = REQUEST_LABELS
    r[0] = out.endpoint
    r[1] = out.instance
    r[2] = out.strategy
    r[3] = status
    core.metrics.requests.inc(r)
  }
  if (out.endpoint) {
    DURATION_LABELS[0] = out.endpoint
    DURATION_LABELS[1] = status
    core.metrics.duration.observe(DURATION_LABELS, seconds)
    core.decisions.record(out, status, ended - started)
  }
  if (core.config.log.accessLog && core.log.isLevelEnabled('info')) logAccess(core.log, req, out, status, started, ended, client.shutdown)
}

/**
 * Answers the routes the router answers itself (setting out.status); for a route it proxies,
 * refuses what can be refused before the body is read, and gives the endpoint.
 */
function dispatch(core: ProxyCore, route: Route, req: Req, res: Res, out: Outcome): Endpoint | undefined {
  if (route.kind === 'ping' || route.kind === 'health') out.check = route.kind === 'ping' ? '/ping' : '/health'
  if (core.draining && (route.kind === 'ping' || route.kind === 'health')) {
    send(req, res, out, 503, JSON.stringify({ status: 'draining' }))
    return void (out.status = 503)
  }
  if (route.kind === 'ping') {
    send(req, res, out, 200, '{}')
    return void (out.status = 200)
  }
  if (route.kind === 'health') {
    const healthy = [...core.endpoints()].reduce((n, ep) => n + ep.healthy().length, 0)
    const status = healthy > 0 ? 200 : 503
    send(req, res, out, status, JSON.stringify({ status: healthy > 0 ? 'ok' : 'unavailable', healthyInstances: healthy }))
    return void (out.status = status)
  }
  if (route.kind === 'unsupported') {
    // Refused rather than guessed at: an unknown API has no routing key, and vLLM's other /v1/
    // paths include ones that change one instance's state (LoRA loading).
    throw notFound('unsupported_route', `the router does not forward ${echo(route.path)}; its OpenAI and vLLM routes are ${OPENAI_ROUTES.join(', ')}, each also under /endpoints/{name}/openai`)
  }
  const ep = core.endpoint(route.endpoint)
  if (ep === undefined) throw notFound('endpoint_not_found', `no endpoint named '${echo(route.endpoint ?? 'default')}'`)
  out.endpoint = ep.name
  if (route.kind === 'models') {
    const data = ep.models().map(({ id, parent }) => ({ id, object: 'model', created: 0, owned_by: 'prefix-router', root: parent ?? id, parent: parent ?? null }))
    send(req, res, out, 200, JSON.stringify({ object: 'list', data }))
    return void (out.status = 200)
  }
  const limit = core.config.limits.maxBodyBytes
  const length = declaredLength(req)
  if (length !== undefined && length > limit) throw tooLarge(limit)
  out.strategy = ep.routing.strategy
  return ep
}

type Routing = Endpoint['routing']

/** Starts reading an invocation's body: whole when it is declared small, else up to its routing prefix. */
function readInvoke(core: ProxyCore, routing: Routing, req: Req, out: Outcome): Promise<Buffer | InvokeBody> {
  out.sagemaker = true
  const { bodyTimeoutMs, maxBodyBytes } = core.config.limits
  const length = declaredLength(req)
  if (length !== undefined && length <= WHOLE_INVOKE_BYTES) return readWhole(req, bodyTimeoutMs, maxBodyBytes)
  return readInvokePrefix(bodyChunks(req, bodyTimeoutMs), routing.prefixLength, maxBodyBytes)
}

function invokeOutbound(routing: Routing, route: Route & { kind: 'invoke' }, req: Req, read: Buffer | InvokeBody, model: string | undefined): Outbound {
  const o = { prefixLength: routing.prefixLength, tenant: req.headers[TENANT_HEADER] }
  const whole = Buffer.isBuffer(read)
  const k = invokeKey(whole ? read : read.prefix, o)
  const body = whole ? read : read.complete ? read.prefix : read.body
  return { key: k.bytes, body, tenant: k.tenant, model, anchor: k.anchor, stream: route.eventStream, path: route.upstreamPath }
}

/**
 * A request to one of the OpenAI-shaped routes (chat, completions, embeddings, responses,
 * rerank, score, tokenize, detokenize), from its JSON body to its answer. A body declared small is read whole, then
 * parsed and sent upstream from inside its 'end' event (one promise, no copy of a body that
 * came in one chunk, no wait for Node to finish with the stream); any other is read chunk by
 * chunk under the shape and pacing limits.
 */
class OpenAIBodyRequest implements WholeUse<number> {
  readonly limits: OpenAIBodyLimits

  constructor(
    readonly core: ProxyCore,
    readonly ep: Endpoint,
    readonly route: Route & { kind: 'openai' },
    readonly req: Req,
    readonly res: Res,
    readonly client: ClientState,
    readonly out: Outcome,
  ) {
    this.limits = openAILimits(core.config, ep.routing, req.headers[TENANT_HEADER])
  }

  /** Resolves with the status answered, as proxyTo does. */
  proxy(): Promise<number> {
    const { req, limits } = this
    const timeoutMs = this.core.config.limits.bodyTimeoutMs
    const length = declaredLength(req)
    if (length !== undefined && length <= WHOLE_BODY_BYTES) return readWhole(req, timeoutMs, limits.maxBytes, this)
    return readOpenAIBody(this.route.api, bodyChunks(req, timeoutMs), limits).then((read) => this.send(read))
  }

  whole(raw: Buffer): Promise<number> {
    const read = openAIBodyOf(this.route.api, raw, this.limits)
    return read instanceof Promise ? read.then((r) => this.send(r)) : this.send(read)
  }

  send(read: OpenAIBody): Promise<number> {
    const { core, ep, req } = this
    return proxyTo(core, ep, req, this.res, this.client, this.out, openAIOutbound(core, ep, this.route, req, read))
  }
}

function openAIOutbound(core: ProxyCore, ep: Endpoint, route: Route & { kind: 'openai' }, req: Req, read: OpenAIBody): Outbound {
  const k = chatKey(core.config, core.log, ep.name, req.headers[TENANT_HEADER], read)
  return { key: k.key, body: read.raw, tenant: k.tenant, model: k.model, anchor: k.anchor, stream: k.stream, path: route.upstreamPath, api: route.api }
}

interface Outbound {
  key: Uint8Array | string
  body: Buffer | AsyncIterable<Buffer>
  tenant: string | undefined
  model: string | undefined
  anchor: number | undefined
  /** The client asked for a streamed answer (its headers come as soon as the instance accepts it). */
  stream: boolean
  path: string
  /** The OpenAI API of a chat or completions body, which the exact view tokenizes. */
  api?: OpenAIApi
}

/** Why a try is being retried (the `reason` label of prefix_router_retries_total), or undefined when it may not be. */
function retryReason(err: unknown, onReset: boolean): string | undefined {
  if (err instanceof UpstreamStatusError) return String(err.status)
  if (isConnectError(err)) return 'connect'
  const code = (err as { code?: string }).code
  if (code === 'UND_ERR_HEADERS_TIMEOUT') return 'timeout'
  if (code === 'ECONNRESET' || code === 'UND_ERR_SOCKET' || code === 'UND_ERR_CLOSED') {
    // Reset after the whole request went out: the instance may have started the work.
    return requestWasSent(err) && !onReset ? undefined : 'reset'
  }
  return undefined
}

/** Whether an instance in rotation has not been tried yet. */
function untried(ep: Endpoint, tries: readonly Lease[]): boolean {
  return ep.healthy().some((i) => !tries.some((l) => l.instance === i.id))
}

const NO_ATTRIBUTES = Object.freeze({})
const NO_HEADERS: Readonly<Record<string, string>> = Object.freeze({})

/** Envoy's retry budget: retries in flight stay under a share of requests in flight (or a floor). */
function budgetAllows(core: ProxyCore): boolean {
  const { budgetPercent, minRetryConcurrency } = core.config.retries
  return core.traffic.retrying < Math.max(minRetryConcurrency, (core.traffic.active * budgetPercent) / 100)
}

/**
 * A request being proxied: what every try sends, and the current try's callbacks for forward()
 * as methods of one object rather than closures made for each request.
 */
class Proxying implements ForwardRequest {
  readonly method: string
  readonly path: string
  readonly headers: Req['headers']
  readonly requestId: string
  readonly body: Buffer | AsyncIterable<Buffer>
  readonly clientAddress: string | undefined
  readonly secure: boolean
  /** Streaming answers start with their headers as soon as the instance accepts the request; whole answers send them only at the end, so only the dispatcher's long timeout fits. */
  readonly headersTimeoutMs: number | undefined
  /** A streamed body (invoke) cannot be sent twice. */
  readonly maxRetries: number
  readonly tries: Lease[] = []
  // The current try.
  instance!: Instance
  lease!: Lease
  attempt = 0
  fwdSpan: Span | undefined = undefined
  responseHeaders: Readonly<Record<string, string>> = NO_HEADERS
  /** performance.now() when the try was sent. */
  sentAt = 0
  /** The try is a retry whose answer has not started: it counts against the retry budget until then, not for a whole stream. */
  retrying = false

  constructor(
    readonly core: ProxyCore,
    readonly ep: Endpoint,
    req: Req,
    readonly client: ClientState,
    readonly out: Outcome,
    readonly span: RequestSpan,
    o: Outbound,
  ) {
    const { retries } = core.config
    this.method = req.method ?? 'POST'
    this.path = o.path
    this.headers = req.headers
    this.requestId = out.requestId
    this.body = o.body
    this.clientAddress = req.socket?.remoteAddress
    this.secure = (req.socket as { encrypted?: boolean } | undefined)?.encrypted === true
    this.maxRetries = Buffer.isBuffer(o.body) ? retries.max : 0
    this.headersTimeoutMs = o.stream && retries.perTryTimeoutMs > 0 ? retries.perTryTimeoutMs : undefined
  }

  /** Makes `pick` the current try, `attempt` tries after the first. */
  begin(pick: Pick, attempt: number, fwdSpan: Span, decision: string): void {
    this.instance = pick.instance
    this.lease = pick.lease
    this.attempt = attempt
    this.fwdSpan = fwdSpan
    this.retrying = attempt > 0
    if (this.retrying) this.core.traffic.retrying++
    // The request id is always sent back; the debug headers only on request. The usual answers'
    // names are spelled out (REQUEST_ID_HEADER, VARIANT_HEADER): until its code is optimised, a
    // literal with a computed key is a runtime call.
    const id = this.requestId
    this.responseHeaders = this.core.config.debugHeaders
      ? { [REQUEST_ID_HEADER]: id, 'x-prefix-router-instance': pick.instance.id, 'x-prefix-router-decision': decision, 'x-prefix-router-retries': String(attempt), ...(this.out.sagemaker && { [VARIANT_HEADER]: VARIANT }) }
      : this.out.sagemaker
        ? { 'x-request-id': id, 'x-amzn-invoked-production-variant': VARIANT }
        : { 'x-request-id': id }
    this.sentAt = performance.now()
  }

  /**
   * Whether another instance may be tried. A request that never reached an instance adds no
   * load by being sent elsewhere: the budget, which stops retries from multiplying an
   * overload, does not count it (`reason` connect).
   */
  canRetry(reason?: string): boolean {
    const { client } = this
    return this.attempt < this.maxRetries && !client.gone && !client.shutdown && untried(this.ep, this.tries) && (reason === 'connect' || budgetAllows(this.core))
  }

  answered(): void {
    if (this.retrying) this.core.traffic.retrying--
    this.retrying = false
  }

  traceHeaders(): Record<string, string> | undefined {
    if (this.span === NO_SPAN) return undefined
    const h: Record<string, string> = {}
    injectInto(this.span, this.fwdSpan!, h)
    return h
  }

  retryStatus(): boolean {
    return this.canRetry()
  }

  onResponse(status: number): void {
    this.answered()
    // Counted when the answer starts, as Envoy does: a stream that runs for minutes must not
    // leave an instance's quick failures looking consecutive.
    this.ep.recordTry(this.instance, status === 502 || status === 503 || status === 504 ? 'gateway' : status >= 500 ? '5xx' : 'ok')
  }

  onCut(): void {
    this.ep.recordTry(this.instance, 'gateway')
  }

  onFirstByte(at: number): void {
    // The instance's prefill is over: longest_prefix stops counting it as queued there.
    this.lease.firstToken()
    this.out.firstByteAt = at
    this.core.metrics.ttfb.observe([this.instance.id], (at - this.sentAt) / 1000)
  }
}

async function proxyTo(core: ProxyCore, ep: Endpoint, req: Req, res: Res, client: ClientState, out: Outcome, o: Outbound): Promise<number> {
  const { retries } = core.config
  // What the latest try failed with: the client's answer when no instance is left to retry on.
  let lastTry: unknown
  out.model = o.model
  out.tenant = o.tenant
  out.bytesIn = Buffer.isBuffer(o.body) ? o.body.length : declaredLength(req)
  const strategy = ep.routing.strategy
  const span = tracingOff() ? NO_SPAN : startRequestSpan(req.headers, { [ATTR.requestId]: out.requestId, [ATTR.endpoint]: ep.name, [ATTR.strategy]: strategy, ...(o.model !== undefined && { [ATTR.model]: echo(o.model) }) })
  const p = new Proxying(core, ep, req, client, out, span, o)
  const tries = p.tries
  let failure: unknown
  core.traffic.active++
  try {
    // The exact view: the request's token ids, before the pick (a failure or a late answer
    // routes it on the approximate view).
    const tokenizer = ep.tokenizer
    let exact: ExactTokens | undefined
    if (tokenizer !== undefined && o.api !== undefined && Buffer.isBuffer(o.body)) {
      const t0 = performance.now()
      exact = await exactTokens(tokenizer, o.api, o.body, o.model, ep.isAdapter(o.model), ep.tokenizeTarget(o.model))
      core.metrics.tokenize.observe([exact === undefined ? 'fallback' : 'ok'], (performance.now() - t0) / 1000)
    }
    for (let attempt = 0; ; attempt++) {
      // A request that records no spans (no SDK, or not sampled) builds no attributes for them.
      const tracing = span.ctx !== undefined
      const pickSpan = startChild(span, 'prefix_router.pick', tracing ? { [ATTR.requestId]: out.requestId, [ATTR.retries]: attempt } : NO_ATTRIBUTES)
      // performance.now() rather than hrtime.bigint(): a double, where a BigInt is an allocation.
      const t0 = performance.now()
      let pick: Pick
      try {
        pick = ep.pick(o.key, o.tenant, o.model, o.anchor, tries, exact)
      } catch (err) {
        endSpan(pickSpan, undefined, err)
        if (attempt > 0) throw err instanceof RequestError && err.code === 'no_healthy_instance' ? lastError(lastTry) : err
        throw err
      }
      const decisionSeconds = (performance.now() - t0) / 1000
      const { lease, instance } = pick
      tries.push(lease)
      out.instance = instance.id
      out.retries = attempt
      core.metrics.decision.observe([strategy], decisionSeconds)
      if (lease.overflow) core.metrics.overflow.inc({ instance: instance.id })
      // Strategies with a target of their own say whether they kept it; the others name themselves.
      const decision = decisionOf(strategy, lease.overflow)
      out.decision = decision
      if (pickSpan.isRecording()) pickSpan.setAttributes({ [ATTR.instance]: instance.id, [ATTR.decision]: decision })
      endSpan(pickSpan, undefined)
      const fwdSpan = startChild(span, 'prefix_router.forward', tracing ? { [ATTR.requestId]: out.requestId, [ATTR.instance]: instance.id, [ATTR.decision]: decision, [ATTR.retries]: attempt } : NO_ATTRIBUTES)
      p.begin(pick, attempt, fwdSpan, decision)
      try {
        let status: number
        try {
          status = await forward(p, res)
        } catch (err) {
          status = await resendFresh(core, p, res, err)
        }
        endSpan(fwdSpan, status)
        out.status = status
        return status
      } catch (err) {
        endSpan(fwdSpan, err instanceof UpstreamStatusError || err instanceof RequestError ? err.status : undefined, client.gone ? undefined : err)
        if (client.gone) return 499
        if (client.shutdown) throw shuttingDown()
        // The client's own failure (a streamed body that timed out) says nothing about the instance.
        if (!(err instanceof RequestError && err.status < 500)) {
          ep.recordTry(instance, err instanceof UpstreamStatusError || retryReason(err, true) !== undefined ? 'gateway' : '5xx')
        }
        if (isConnectError(err)) ep.markDown(instance, `connection failed: ${(err as Error).message}`)
        lastTry = err
        const reason = retryReason(err, retries.onReset)
        if (reason !== undefined && !res.headersSent && p.canRetry(reason)) {
          core.metrics.retries.inc({ instance: instance.id, reason })
          core.log.warn({ instance: instance.id, reason, attempt: attempt + 1, err: (err as Error).message }, 'try failed; retrying on another instance')
          continue
        }
        if (isConnectError(err) && ep.healthy().length === 0) throw noHealthyInstance(ep.name, Math.max(1, Math.ceil(core.config.health.intervalMs / 1000)))
        throw err instanceof RequestError ? err : upstreamError(err)
      } finally {
        p.answered()
        lease.release()
      }
    }
  } catch (err) {
    failure = err
    throw err
  } finally {
    core.traffic.active--
    if (span.span.isRecording() && out.decision !== undefined) span.span.setAttributes({ [ATTR.instance]: out.instance, [ATTR.decision]: out.decision, [ATTR.retries]: out.retries })
    const status = failure === undefined ? (client.gone ? 499 : out.status) : failure instanceof RequestError ? failure.status : upstreamError(failure).status
    endSpan(span.span, status, failure)
  }
}

/**
 * A try reset before any answer (resetUnanswered: the instance did not take it, as when it
 * closes an idle keep-alive connection as the request is written) goes again to the same
 * instance on a new connection: once, outside retries.max and the budget (it adds no load,
 * like a refused connection), and not counted against the instance. Anything else rethrows.
 */
function resendFresh(core: ProxyCore, p: Proxying, res: Res, err: unknown): Promise<number> {
  const { client } = p
  if (!resetUnanswered(err) || !Buffer.isBuffer(p.body) || res.headersSent || client.gone || client.shutdown) throw err
  core.metrics.retries.inc({ instance: p.instance.id, reason: 'stale_connection' })
  core.log.debug({ instance: p.instance.id, err: (err as Error).message }, 'connection reset before the request was taken; sending it again on a new connection')
  return forwardFresh(p, res)
}

/** When no instance is left to retry on, the client gets what the last try got. */
function lastError(err: unknown): ProxyError {
  if (err instanceof UpstreamStatusError) return upstreamFailed('upstream_error', `every instance tried answered an error; the last answered ${err.status}`, err.status)
  return err instanceof RequestError ? toProxyError(err) : upstreamError(err)
}
