// OpenTelemetry spans around routing and forwarding. Only the API is a dependency: with no SDK
// registered by the embedding application every call below is a no-op (about 1 µs a request
// in all), and with one, a request shows as a `prefix_router.proxy` span holding one
// `prefix_router.pick` and one `prefix_router.forward` span per try.
import { context, INVALID_SPAN_CONTEXT, propagation, ProxyTracerProvider, ROOT_CONTEXT, SpanKind, SpanStatusCode, trace, type Attributes, type Context, type Span } from '@opentelemetry/api'
import type { IncomingHttpHeaders } from 'node:http'

// Taken once: the API's proxy tracer finds a provider registered later by itself.
const NAME = 'prefix-router'
const tracer = trace.getTracer(NAME)

export const ATTR = {
  requestId: 'prefix_router.request_id',
  endpoint: 'prefix_router.endpoint',
  strategy: 'prefix_router.strategy',
  instance: 'prefix_router.instance',
  decision: 'prefix_router.decision',
  /** Tries before this one (on a try's spans) or before the one that answered (on the request's). */
  retries: 'prefix_router.retries',
  model: 'gen_ai.request.model',
  status: 'http.response.status_code',
} as const

/**
 * The parent of a request's spans: the span the embedding application made active (an HTTP
 * instrumentation's server span), else the trace the client sent (`traceparent`, read by the
 * registered propagator), else none.
 */
function parentOf(headers: IncomingHttpHeaders): Context {
  const active = context.active()
  return trace.getSpan(active) !== undefined ? active : propagation.extract(active, headers)
}

export interface RequestSpan {
  readonly span: Span
  /** The request's parent context (see parentOf). */
  readonly parent: Context
  /** Context for the child spans; undefined when the request span records nothing (no SDK, or not sampled). */
  readonly ctx: Context | undefined
}

// What the children of a request that records nothing are: nothing to make, end or export.
const NOTHING = trace.wrapSpanContext(INVALID_SPAN_CONTEXT)

/** A request that makes no span and carries no trace context: see tracingOff. */
export const NO_SPAN: RequestSpan = Object.freeze({ span: NOTHING, parent: ROOT_CONTEXT, ctx: undefined })

/**
 * No tracer provider registered and no propagator: every span would be a no-op and every
 * inject write nothing, yet making them (contexts, attributes, span-context checks) cost a
 * few microseconds a request. Asked per request, so a provider or propagator registered
 * later takes effect at once.
 */
export function tracingOff(): boolean {
  const p = trace.getTracerProvider()
  return p instanceof ProxyTracerProvider && p.getDelegateTracer(NAME) === undefined && propagation.fields().length === 0
}

export function startRequestSpan(headers: IncomingHttpHeaders, attributes: Attributes): RequestSpan {
  const parent = parentOf(headers)
  const span = tracer.startSpan('prefix_router.proxy', { kind: SpanKind.INTERNAL, attributes }, parent)
  // A new context per span is most of what tracing costs with no SDK: only made for spans that record.
  return { span, parent, ctx: span.isRecording() ? trace.setSpan(parent, span) : undefined }
}

export function startChild(parent: RequestSpan, name: 'prefix_router.pick' | 'prefix_router.forward', attributes: Attributes): Span {
  if (parent.ctx === undefined) return NOTHING
  return tracer.startSpan(name, { kind: name === 'prefix_router.forward' ? SpanKind.CLIENT : SpanKind.INTERNAL, attributes }, parent.ctx)
}

/**
 * Puts the try's trace context on the upstream request (`traceparent`, with the registered
 * propagator): the forward span's when it records, else the request span's (a sampled-out
 * trace stays sampled out upstream), else the client's as it came.
 */
export function injectInto(parent: RequestSpan, span: Span, headers: Record<string, string | string[]>): void {
  if (parent === NO_SPAN) return
  if (parent.ctx !== undefined) propagation.inject(trace.setSpan(parent.ctx, span), headers)
  else if (trace.isSpanContextValid(parent.span.spanContext())) propagation.inject(trace.setSpan(parent.parent, parent.span), headers)
  else propagation.inject(parent.parent, headers)
}

/** Ends a span with the answer's status: 5xx and errors without one mark it failed (4xx are the client's doing). */
export function endSpan(span: Span, status: number | undefined, err?: unknown): void {
  if (span.isRecording()) {
    if (status !== undefined && status > 0) span.setAttribute(ATTR.status, status)
    if (status !== undefined ? status >= 500 : err !== undefined) {
      if (err !== undefined) span.recordException(err instanceof Error ? err : String(err))
      span.setStatus({ code: SpanStatusCode.ERROR, ...(err instanceof Error && { message: err.message }) })
    }
  }
  span.end()
}
