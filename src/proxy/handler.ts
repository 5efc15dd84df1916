// One front request, start to end: route, routing key, pick, forward, release. The lease
// is released in `finally`, so success, upstream error, client abort and timeout all
// return the in-flight count to where it was.
import type { Config } from '../config/config.js'
import type { Endpoint } from '../fleet/endpoint.js'
import type { ProxyCore } from './core.js'
import { declaredLength, proxyTo, type Outbound } from './tries.js'
import { proxyDisaggregated } from './pd/proxy-pd.js'
import { PREFILLER_HEADER, proxySidecar } from './pd/sidecar.js'
import { disaggregates } from '../schedule/index.js'
import { invokeKey, TENANT_HEADER } from '../core/key/index.js'
import { readInvokePrefix, type InvokeBody } from './invoke-body.js'
import { openAILimits } from '../request/request-key.js'
import { logAccess, newOutcome, type Outcome } from './access-log.js'
import { bodyChunks, bodyLeft, endAfterBody, readWhole, type WholeUse } from './body.js'
import { EventStreamResponse } from './event-stream-response.js'
import { echo } from '../core/echo.js'
import { RequestError } from '../core/errors.js'
import { checkDeclaredLength, checkMethod, endpointOf } from '../request/admission.js'
import { duplicateHost, notFound, toProxyError, upstreamError } from '../request/errors.js'
import { CLIENT_GONE, type ClientState } from './forward.js'
import { openAIBodyOf, readOpenAIBody, WHOLE_BODY_BYTES, type OpenAIBody, type OpenAIBodyLimits } from '../request/openai-body.js'
import { repeatsHost } from './host-header.js'
import { REQUEST_ID_HEADER, requestIdOf } from '../request/request-id.js'
import { matchRoute, OPENAI_ROUTES, type Route } from '../request/routes.js'
import { inferenceComponentOf, INFERENCE_COMPONENT_HEADER, VARIANT, VARIANT_HEADER } from './sagemaker-headers.js'
import type { Req, Res } from './types.js'

export type { ProxyCore } from './core.js'

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
    if (m.route.kind !== 'unsupported') checkMethod(m, req.method)
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
  const ep = endpointOf(core, route.endpoint)
  out.endpoint = ep.name
  if (route.kind === 'models') {
    const data = ep.models().map(({ id, parent }) => ({ id, object: 'model', created: 0, owned_by: 'prefix-router', root: parent ?? id, parent: parent ?? null }))
    send(req, res, out, 200, JSON.stringify({ object: 'list', data }))
    return void (out.status = 200)
  }
  checkDeclaredLength(req.headers['content-length'], core.config.limits.maxBodyBytes)
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
    const o = openAIOutbound(core, ep, this.route, req, read)
    // A disaggregated endpoint's generation requests are scheduled over two instances.
    if (ep.disaggregated && disaggregates(o.api) && Buffer.isBuffer(o.body)) return proxyDisaggregated(core, ep, req, this.res, this.client, this.out, o as Outbound & { body: Buffer })
    // A decode pod's sidecar: the endpoint picker named the prefill pod.
    const pods = core.prefillPods
    if (pods !== undefined && disaggregates(o.api) && Buffer.isBuffer(o.body)) {
      const prefiller = req.headers[PREFILLER_HEADER]
      if (typeof prefiller === 'string' && prefiller !== '') return proxySidecar(core, pods, ep, req, this.res, this.client, this.out, o as Outbound & { body: Buffer }, prefiller)
    }
    return proxyTo(core, ep, req, this.res, this.client, this.out, o)
  }
}

function openAIOutbound(core: ProxyCore, ep: Endpoint, route: Route & { kind: 'openai' }, req: Req, read: OpenAIBody): Outbound {
  const k = core.keying.key(core.config, core.log, ep, req.headers[TENANT_HEADER], read)
  return { key: k.key, body: read.raw, tenant: k.tenant, model: k.model, anchor: k.anchor, stream: k.stream, path: route.upstreamPath, api: route.api }
}

