// A request to a disaggregated endpoint, from its schedule to its answer. The scheduler chooses
// the decode instance (and whether the request is worth a prefill leg at all); with vLLM's
// NixlConnector the prefill leg runs first and its KV parameters go with the decode leg; with
// SGLang's both legs run at once. Failures, in the order they can happen:
// - a prefill leg that fails before answering is tried on another prefill instance (prefill-leg.ts);
//   when none gives usable parameters, the request runs whole on the decode instance (or is
//   answered 502, with whenNoPrefill fail);
// - the client leaving during the prefill aborts it, and no decode leg is sent;
// - a decode leg that fails before its first byte is tried on another decode instance: with the
//   same parameters when it never reached the instance and the prefill instance still holds the
//   blocks (kvHoldMs), else after prefilling again; one that refuses the parameters (a 4xx to a
//   request the prefill instance accepted) is tried whole, without them;
// - every lease is released when its leg ends (the decode one by the tries' loop).
import type { DisaggregationConfig } from '../../config/disaggregation.js'
import type { Endpoint } from '../../fleet/endpoint.js'
import type { Instance } from '../../fleet/instance.js'
import { endpointPicker } from '../../schedule/endpoint-picker.js'
import { APPROX_BYTES_PER_TOKEN, schedule, type Chosen, type RequestView, type Schedule } from '../../schedule/index.js'
import type { Outcome } from '../access-log.js'
import type { ProxyCore } from '../core.js'
import { isConnectError, shuttingDown, upstreamFailed } from '../../request/errors.js'
import { PrefillLegFailed, resetUnanswered, UpstreamStatusError, type ClientState } from '../forward.js'
import { endSpan, type RequestSpan } from '../tracing.js'
import { proxyTo, requestSpan, requestTokens, type Outbound } from '../tries.js'
import type { Req, Res } from '../types.js'
import { CachedTokensResponse } from './cached-tokens.js'
import { nixlDecodeBody, nixlPrefillBody } from './nixl.js'
import { judgeNixl, PrefillRefusal } from './judge.js'
import { runPrefill, sendPrefill, type Judge, type PrefillLeg, type PrefillRequest } from './prefill-leg.js'
import { bootstrapFor, sglangBody } from './sglang.js'


interface Call {
  core: ProxyCore
  ep: Endpoint
  req: Req
  res: Res
  client: ClientState
  out: Outcome
  o: Outbound & { body: Buffer }
  d: DisaggregationConfig
  span: RequestSpan
  view: RequestView
  prefillRequest: PrefillRequest
}

export async function proxyDisaggregated(core: ProxyCore, ep: Endpoint, req: Req, res: Res, client: ClientState, out: Outcome, o: Outbound & { body: Buffer }): Promise<number> {
  out.model = o.model
  out.tenant = o.tenant
  const span = requestSpan(ep, req, out, o.model)
  const d = ep.disaggregation
  let s: Schedule<Instance>
  let view: RequestView
  try {
    const exact = await requestTokens(core, ep, o)
    view = { key: o.key, tenant: o.tenant, model: o.model, anchor: o.anchor, exact, promptTokens: exact?.ids.length ?? Math.ceil(o.body.length / APPROX_BYTES_PER_TOKEN) }
    const t0 = performance.now()
    s = schedule(endpointPicker(ep), view, d)
    core.metrics.decision.observe([ep.routing.strategy], (performance.now() - t0) / 1000)
  } catch (err) {
    endSpan(span.span, undefined, err)
    throw err
  }
  out.uncachedTokens = s.uncachedTokens
  const prefillRequest: PrefillRequest = { core, ep, req, out, client, o, timeoutMs: d.prefillTimeoutMs }
  const c: Call = { core, ep, req, res, client, out, o, d, span, view, prefillRequest }
  if (s.profile === 'single') {
    out.pd = s.reason
    core.metrics.pd.requests.inc({ endpoint: ep.name, path: s.reason })
    return proxyTo(core, ep, req, res, client, out, o, { span, exact: view.exact, first: s.target, leg: 'decode' })
  }
  return d.connector === 'sglang' ? sglang(c, s.prefill, s.decode) : nixl(c, s.prefill, s.decode)
}

/** Runs the prefill leg with the traffic counted (the retry budget reads it), from `first`. */
async function prefillFrom<T>(c: Call, first: Chosen<Instance>, body: (i: Instance) => Buffer, judge: Judge<T>): Promise<PrefillLeg<T>> {
  c.core.traffic.active++
  try {
    return await runPrefill(c.prefillRequest, first, body, judge)
  } finally {
    c.core.traffic.active--
  }
}

/**
 * What a prefill leg that gave no parameters leaves the request: the client's own answer when
 * it left, or the prefill instance refused the request; decode-only on `decode`'s instance, or
 * 502 with whenNoPrefill fail. Throws what the client is to be answered; returns the status of
 * a decode-only run.
 */
async function withoutPrefill(c: Call, leg: Exclude<PrefillLeg<unknown>, { kind: 'ok' }>, decode: Chosen<Instance>): Promise<number> {
  const { core, ep, out } = c
  if (leg.kind !== 'failed') {
    decode.lease.release()
    if (leg.kind === 'gone') {
      endSpan(c.span.span, 499)
      return 499
    }
    endSpan(c.span.span, leg.kind === 'shutdown' ? 503 : leg.status)
    if (leg.kind === 'shutdown') throw shuttingDown()
    throw new PrefillRefusal(leg.status, leg.body.toString('utf8'))
  }
  if (c.d.whenNoPrefill === 'fail') {
    decode.lease.release()
    endSpan(c.span.span, 502)
    throw upstreamFailed('prefill_failed', `no prefill instance gave usable KV parameters; the last ${leg.reason === 'connect' ? 'could not be reached' : `failed: ${leg.reason}`} (${leg.message})`)
  }
  out.pd = 'prefill_failed'
  core.metrics.pd.requests.inc({ endpoint: ep.name, path: 'prefill_failed' })
  return proxyTo(core, ep, c.req, c.res, c.client, out, c.o, { span: c.span, exact: c.view.exact, first: decode, leg: 'decode' })
}

/** The try failed without the instance reading the request: a refused connection, or a reset before any answer. */
const neverReached = (err: unknown) => isConnectError(err) || resetUnanswered(err)

async function nixl(c: Call, prefill: Chosen<Instance>, decode: Chosen<Instance>): Promise<number> {
  const { core, ep, out, o, d } = c
  const prefillBody = nixlPrefillBody(o.body, o.api!)
  const leg = await prefillFrom(c, prefill, () => prefillBody, judgeNixl)
  if (leg.kind !== 'ok') return withoutPrefill(c, leg, decode)
  out.pd = 'disaggregated'
  core.metrics.pd.requests.inc({ endpoint: ep.name, path: 'disaggregated' })
  let value = leg.value
  let answeredAt = performance.now()
  const res = value.cached === undefined ? c.res : new CachedTokensResponse(c.res, value.cached)
  const bodyFor = async (_attempt: number, err: unknown): Promise<Buffer | undefined> => {
    if (out.pd === 'prefill_failed') return undefined // decode-only already
    if (err instanceof UpstreamStatusError && err.status < 500) {
      // The decode instance turned the parameters down (the prefill instance took the client's
      // request as it is, so the request itself is not what it refused): whole, without them.
      core.metrics.pd.prefillFailures.inc({ endpoint: ep.name, instance: out.prefill ?? '', reason: 'decode_refused' })
      core.log.warn({ instance: out.instance, prefill: out.prefill, status: err.status, reason: 'decode_refused' }, 'the decode instance refused the KV parameters; the request runs whole on another decode instance')
      out.kvParams = 'decode_refused'
      return decodeOnly()
    }
    if (neverReached(err) && performance.now() - answeredAt < d.kvHoldMs) {
      core.metrics.pd.decodeRetries.inc({ endpoint: ep.name, params: 'same' })
      return undefined
    }
    // The decode instance read the request and may have taken the blocks (the prefill instance
    // frees them once read), or they may have expired: the prompt is prefilled again.
    core.metrics.pd.decodeRetries.inc({ endpoint: ep.name, params: 'new' })
    let again: Chosen<Instance>
    try {
      again = ep.pick(o.key, o.tenant, o.model, o.anchor, undefined, c.view.exact, 'prefill')
    } catch {
      return decodeOnly()
    }
    const next = await prefillFrom(c, again, () => prefillBody, judgeNixl)
    if (next.kind === 'ok') {
      value = next.value
      answeredAt = performance.now()
      if (res instanceof CachedTokensResponse && value.cached !== undefined) res.cached = value.cached
      return nixlDecodeBody(o.body, value.params)
    }
    if (next.kind === 'gone') return undefined // the next try ends at once, 499
    if (next.kind === 'shutdown') throw shuttingDown()
    if (next.kind === 'refused') throw new PrefillRefusal(next.status, next.body.toString('utf8'))
    if (d.whenNoPrefill === 'fail') throw upstreamFailed('prefill_failed', `no prefill instance gave usable KV parameters on the decode leg's retry: ${next.reason} (${next.message})`)
    return decodeOnly()
  }
  const decodeOnly = (): Buffer => {
    out.pd = 'prefill_failed'
    core.metrics.pd.requests.inc({ endpoint: ep.name, path: 'prefill_failed' })
    if (res instanceof CachedTokensResponse) res.passThrough()
    return o.body
  }
  return proxyTo(core, ep, c.req, res, c.client, out, { ...o, body: nixlDecodeBody(o.body, value.params) }, { span: c.span, exact: c.view.exact, first: decode, leg: 'decode', bodyFor, refusable: () => out.pd === 'disaggregated' })
}

/**
 * SGLang: both legs at once, one room. The prefill leg's answer is read and dropped; when it
 * fails before the decode leg has begun answering, the decode try is aborted (its instance waits
 * for a KV cache that will not come) and the pair is tried again with a new room, on another
 * prefill instance when one is left.
 */
async function sglang(c: Call, firstPrefill: Chosen<Instance>, decode: Chosen<Instance>): Promise<number> {
  const { core, ep, out, o, client } = c
  out.pd = 'disaggregated'
  core.metrics.pd.requests.inc({ endpoint: ep.name, path: 'disaggregated' })
  const tried: Chosen<Instance>['lease'][] = []
  let running: { ac: AbortController; done: Promise<void> } | undefined
  const start = (p: Chosen<Instance>): Buffer => {
    const b = bootstrapFor(p.instance.url, p.instance.bootstrapPort)
    const ac = new AbortController()
    tried.push(p.lease)
    out.prefill = p.instance.id
    out.prefillRetries = tried.length - 1
    const started = performance.now()
    core.traffic.active++
    const done = sendPrefill(c.prefillRequest, p.instance, sglangBody(o.body, b, 'prefill'), ac).then((t) => {
      core.traffic.active--
      p.lease.release()
      out.prefillMs = performance.now() - started
      core.metrics.pd.legSeconds.observe({ endpoint: ep.name, leg: 'prefill' }, out.prefillMs / 1000)
      const ok = t.kind === 'answer' && t.status >= 200 && t.status < 300
      if (t.kind === 'gone' || t.kind === 'shutdown' || ac.signal.aborted) return
      ep.recordTry(p.instance, ok ? 'ok' : t.kind === 'answer' && t.status < 500 ? 'ok' : 'gateway')
      if (ok) return
      const reason = t.kind === 'answer' ? String(t.status) : t.reason
      if (t.kind === 'failed' && t.connect) ep.markDown(p.instance, `connection failed: ${t.message}`)
      core.metrics.pd.prefillFailures.inc({ endpoint: ep.name, instance: p.instance.id, reason })
      core.log.warn({ instance: p.instance.id, reason }, 'prefill leg failed')
      // The decode leg waits for this room: end its try, unless its answer is under way.
      if (c.res.headersSent) return
      const err = new PrefillLegFailed(reason)
      if (client.abort !== undefined) client.abort(err)
      else client.abortNext = err
    })
    running = { ac, done }
    return sglangBody(o.body, b, 'decode')
  }
  const bodyFor = async (): Promise<Buffer | undefined> => {
    // A new room for the new try: the old prefill is ended (its answer is of no use now).
    running?.ac.abort()
    await running?.done
    client.abortNext = undefined
    let next: Chosen<Instance>
    try {
      next = ep.pick(o.key, o.tenant, o.model, o.anchor, tried, c.view.exact, 'prefill')
    } catch {
      try {
        next = ep.pick(o.key, o.tenant, o.model, o.anchor, undefined, c.view.exact, 'prefill')
      } catch {
        out.pd = 'prefill_failed'
        core.metrics.pd.requests.inc({ endpoint: ep.name, path: 'prefill_failed' })
        if (ep.disaggregation.whenNoPrefill === 'fail') throw upstreamFailed('prefill_failed', 'no prefill instance can take the request')
        return o.body
      }
    }
    return start(next)
  }
  try {
    return await proxyTo(core, ep, c.req, c.res, client, out, { ...o, body: start(firstPrefill) }, { span: c.span, exact: c.view.exact, first: decode, leg: 'decode', bodyFor })
  } finally {
    client.abortNext = undefined
    // The decode leg has ended: a prefill still running (the client left, the decode failed) is of no use.
    running?.ac.abort()
  }
}
