// One request's tries on instances: the pick (the scheduler's first, then retries on other
// instances), forward, and the bookkeeping of each try (leases released in `finally`, the retry
// budget, outlier detection, spans, the access log's fields). The handler reads the body and
// calls it; a disaggregated request runs its decode leg through it.
import type { Span } from '@opentelemetry/api'
import type { OpenAIApi } from '../core/key/openai-key.js'
import type { ExactTokens, Lease } from '../core/router.js'
import type { Endpoint, Pick } from '../fleet/endpoint.js'
import type { Instance } from '../fleet/instance.js'
import { echo } from '../core/echo.js'
import { noHealthyInstance, RequestError } from '../core/errors.js'
import { decisionOf } from '../core/strategies.js'
import type { Outcome } from './access-log.js'
import type { ProxyCore } from './core.js'
import { isConnectError, isRefusal, ProxyError, shuttingDown, toProxyError, upstreamError, upstreamFailed } from '../request/errors.js'
import { forward, forwardFresh, PrefillLegFailed, resetUnanswered, requestWasSent, UpstreamStatusError, type ClientState, type ForwardRequest } from './forward.js'
import { REQUEST_ID_HEADER } from '../request/request-id.js'
import { VARIANT, VARIANT_HEADER } from './sagemaker-headers.js'
import { ATTR, endSpan, injectInto, NO_SPAN, startChild, startRequestSpan, tracingOff, type RequestSpan } from './tracing.js'
import type { Req, Res } from './types.js'
import type { Leg } from '../fleet/groups.js'

/** What the pick saw, for the access log: which view decided, and the blocks held at the instance. */
export function noteLease(out: Outcome, lease: Lease): void {
  if (lease.blocks === 0) return
  out.view = lease.exact ? 'exact' : 'approximate'
  out.blocks = lease.blocks
  out.heldBlocks = lease.heldBlocks
}

/** The Content-Length the client declared, if any. */
export function declaredLength(req: Req): number | undefined {
  const v = req.headers['content-length']
  return v === undefined ? undefined : Number(v)
}

export interface Outbound {
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
export function retryReason(err: unknown, onReset: boolean): string | undefined {
  if (err instanceof UpstreamStatusError) return String(err.status)
  // A disaggregated request whose prefill leg failed while its decode leg waited (SGLang's
  // both-at-once): the decode instance was told of a KV cache that will not come.
  if (err instanceof PrefillLegFailed) return 'prefill'
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
export function untried(ep: Endpoint, tries: readonly Lease[], leg?: Leg): boolean {
  return ep.healthyFor(ep.disaggregated ? (leg ?? 'decode') : undefined).some((i) => !tries.some((l) => l.instance === i.id))
}

const NO_ATTRIBUTES = Object.freeze({})
const NO_HEADERS: Readonly<Record<string, string>> = Object.freeze({})

/** Envoy's retry budget: retries in flight stay under a share of requests in flight (or a floor). */
export function budgetAllows(core: ProxyCore): boolean {
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
  /** A disaggregated request's decode leg may change it between tries (TryPlan.bodyFor). */
  body: Buffer | AsyncIterable<Buffer>
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
  /** Retries pick among the instances playing this leg (a disaggregated request's decode leg). */
  leg: Leg | undefined = undefined
  /** The plan, whose refusable() says whether a 4xx is a refusal of the body it added. */
  plan: TryPlan | undefined = undefined

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
    return this.attempt < this.maxRetries && !client.gone && !client.shutdown && untried(this.ep, this.tries, this.leg) && (reason === 'connect' || budgetAllows(this.core))
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

  get refusable(): boolean {
    return this.plan?.refusable?.() === true
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

/**
 * The exact view: the request's token ids, before the pick; undefined routes it on the
 * approximate view (no tokenizer, or one that failed or answered late).
 */
export async function requestTokens(core: ProxyCore, ep: Endpoint, o: Outbound): Promise<ExactTokens | undefined> {
  if (o.api === undefined || !Buffer.isBuffer(o.body)) return undefined
  return core.keying.tokens(ep, o.api, o.body, o.model)
}

/** The request's span (every try and leg is a child of it). */
export function requestSpan(ep: Endpoint, req: Req, out: Outcome, model: string | undefined): RequestSpan {
  if (tracingOff()) return NO_SPAN
  return startRequestSpan(req.headers, { [ATTR.requestId]: out.requestId, [ATTR.endpoint]: ep.name, [ATTR.strategy]: ep.routing.strategy, ...(model !== undefined && { [ATTR.model]: echo(model) }) })
}

/**
 * What the caller settled before the tries: a disaggregated request has been scheduled (its
 * tokens had, its decode instance chosen) and runs its decode leg here.
 */
export interface TryPlan {
  span: RequestSpan
  exact: ExactTokens | undefined
  /** The first try's pick (its lease is released as any try's). */
  first: Pick
  /** Later tries pick among the instances playing this leg. */
  leg: Leg
  /**
   * Before try `attempt` (> 0), after `err`: the body to send, when it must change (a decode
   * leg's KV parameters may have to be had again); undefined sends the same one.
   */
  bodyFor?(attempt: number, err: unknown): Promise<Buffer | undefined>
  /**
   * Whether a 4xx answer to the current body is the instance refusing what the router put in it
   * (a decode leg's KV parameters: the prefill instance accepted the client's request as it
   * is), so that the request is tried again (bodyFor says with what) rather than answered.
   */
  refusable?(): boolean
}

export async function proxyTo(core: ProxyCore, ep: Endpoint, req: Req, res: Res, client: ClientState, out: Outcome, o: Outbound, plan?: TryPlan): Promise<number> {
  const { retries } = core.config
  // What the latest try failed with: the client's answer when no instance is left to retry on.
  let lastTry: unknown
  out.model = o.model
  out.tenant = o.tenant
  out.bytesIn = Buffer.isBuffer(o.body) ? o.body.length : declaredLength(req)
  const strategy = ep.routing.strategy
  const span = plan?.span ?? requestSpan(ep, req, out, o.model)
  const p = new Proxying(core, ep, req, client, out, span, o)
  p.leg = plan?.leg
  p.plan = plan
  const tries = p.tries
  let failure: unknown
  core.traffic.active++
  try {
    const exact = plan === undefined ? await requestTokens(core, ep, o) : plan.exact
    for (let attempt = 0; ; attempt++) {
      if (attempt > 0 && plan?.bodyFor !== undefined) {
        const body = await plan.bodyFor(attempt, lastTry)
        if (body !== undefined) p.body = body
      }
      // A request that records no spans (no SDK, or not sampled) builds no attributes for them.
      const tracing = span.ctx !== undefined
      const pickSpan = startChild(span, 'prefix_router.pick', tracing ? { [ATTR.requestId]: out.requestId, [ATTR.retries]: attempt } : NO_ATTRIBUTES)
      // performance.now() rather than hrtime.bigint(): a double, where a BigInt is an allocation.
      const t0 = performance.now()
      let pick: Pick
      try {
        pick = attempt === 0 && plan !== undefined ? plan.first : ep.pick(o.key, o.tenant, o.model, o.anchor, tries, exact, plan?.leg)
      } catch (err) {
        endSpan(pickSpan, undefined, err)
        if (attempt > 0) throw isRefusal(err, 'no_healthy_instance', 'no_decode_instance') ? lastError(lastTry) : err
        throw err
      }
      const decisionSeconds = (performance.now() - t0) / 1000
      const { lease, instance } = pick
      tries.push(lease)
      out.instance = instance.id
      out.retries = attempt
      // The scheduler's own pick is timed where it was made.
      if (attempt > 0 || plan === undefined) core.metrics.decision.observe([strategy], decisionSeconds)
      noteLease(out, lease)
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
        if (isConnectError(err) && ep.healthy().length === 0) throw toProxyError(noHealthyInstance(ep.name, Math.max(1, Math.ceil(core.config.health.intervalMs / 1000))))
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
