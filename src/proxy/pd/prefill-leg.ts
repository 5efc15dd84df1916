// A disaggregated request's prefill leg: sent to a prefill instance, its whole (small) answer
// read, and judged: KV parameters the decode leg can use, or why not. A leg that fails before
// answering (no connection, a reset, a timeout, a 5xx) is tried on another prefill instance
// within the retry budget; the lease of each try is released when it ends, so the prefill
// instance stops counting the request once its prompt is computed.
import type { Lease } from '../../core/router.js'
import type { Endpoint } from '../../fleet/endpoint.js'
import type { Instance } from '../../fleet/instance.js'
import type { Chosen } from '../../schedule/types.js'
import type { Outcome } from '../access-log.js'
import type { ProxyCore } from '../core.js'
import { isConnectError } from '../../request/errors.js'
import { CLIENT_GONE, requestHeaders, SHUTDOWN, type ClientState } from '../forward.js'
import { budgetAllows, type Outbound } from '../tries.js'
import type { Req } from '../types.js'

/** A prefill answer is one token's completion: far below this, which only stops a broken instance. */
const MAX_ANSWER_BYTES = 1 << 20

/** What one prefill try came to. */
export type PrefillTry =
  | { kind: 'answer'; status: number; contentType: string; body: Buffer }
  | { kind: 'failed'; reason: string; message: string; connect: boolean }
  | { kind: 'gone' }
  | { kind: 'shutdown' }

/** The request's side every try shares: where it goes and what it carries besides the body. */
export interface PrefillRequest {
  core: ProxyCore
  ep: Endpoint
  req: Req
  out: Outcome
  client: ClientState
  o: Outbound
  timeoutMs: number
}

/**
 * One prefill try on `instance`: the answer read whole (bounded), or why none came. The client
 * leaving, or the drain ending the request, stops it where it is: through the request's abort
 * hook, or, when a decode leg runs beside it and holds that hook, through `own` (the caller
 * aborts it when the decode leg ends).
 */
export async function sendPrefill(r: PrefillRequest, instance: Instance, body: Buffer, own?: AbortController): Promise<PrefillTry> {
  const { client } = r
  if (client.gone) return { kind: 'gone' }
  if (client.shutdown) return { kind: 'shutdown' }
  const ac = own ?? new AbortController()
  if (own === undefined) client.abort = (err) => ac.abort(err)
  const headers = requestHeaders({
    headers: r.req.headers,
    body,
    clientAddress: r.req.socket?.remoteAddress,
    secure: (r.req.socket as { encrypted?: boolean } | undefined)?.encrypted === true,
    requestId: r.out.requestId,
  })
  try {
    const res = await instance.dispatcher.request({
      path: instance.basePath + r.o.path,
      method: 'POST',
      headers: headers as unknown as string[],
      body,
      signal: ac.signal,
      headersTimeout: r.timeoutMs,
      bodyTimeout: r.timeoutMs,
    })
    const chunks: Buffer[] = []
    let size = 0
    for await (const c of res.body) {
      size += (c as Buffer).length
      if (size > MAX_ANSWER_BYTES) {
        res.body.destroy()
        return { kind: 'failed', reason: 'answer_too_large', message: `the prefill answer exceeded ${MAX_ANSWER_BYTES} bytes`, connect: false }
      }
      chunks.push(c as Buffer)
    }
    const type = res.headers['content-type']
    return { kind: 'answer', status: res.statusCode, contentType: Array.isArray(type) ? (type[0] ?? '') : (type ?? ''), body: Buffer.concat(chunks) }
  } catch (err) {
    if (client.gone || ac.signal.reason === CLIENT_GONE) return { kind: 'gone' }
    if (client.shutdown || ac.signal.reason === SHUTDOWN) return { kind: 'shutdown' }
    return { kind: 'failed', reason: failureReason(err), message: (err as Error).message, connect: isConnectError(err) }
  } finally {
    if (own === undefined) client.abort = undefined
  }
}

function failureReason(err: unknown): string {
  if (isConnectError(err)) return 'connect'
  const code = (err as { code?: string }).code
  if (code === 'UND_ERR_HEADERS_TIMEOUT' || code === 'UND_ERR_BODY_TIMEOUT') return 'timeout'
  return 'reset'
}

/** How a prefill attempt ended, once its tries are over. */
export type PrefillLeg<T> =
  | { kind: 'ok'; value: T; instance: Instance }
  /** No usable answer from any prefill instance tried: why the last one failed. */
  | { kind: 'failed'; reason: string; message: string }
  /** A prefill instance refused the request itself (a 4xx): the client gets that answer. */
  | { kind: 'refused'; status: number; contentType: string; body: Buffer }
  | { kind: 'gone' }
  | { kind: 'shutdown' }

/** What the connector makes of a 2xx answer: the value the decode leg needs, or why it is unusable. */
export type Judge<T> = (answer: { contentType: string; body: Buffer }) => { ok: true; value: T } | { ok: false; reason: string; message: string }

/**
 * Runs the prefill leg from `first` (the scheduler's pick), trying other prefill instances after
 * a failure that says nothing against the request, while retries.max, the retry budget and
 * untried prefill instances allow. Records each try's outcome for outlier detection, and its
 * failures in the metrics and the log. `body` is the leg's body for an instance.
 */
export async function runPrefill<T>(r: PrefillRequest, first: Chosen<Instance>, body: (i: Instance) => Buffer, judge: Judge<T>): Promise<PrefillLeg<T>> {
  const { core, ep, out } = r
  const tries: Lease[] = []
  let chosen = first
  let retrying = false
  const started = performance.now()
  try {
    for (let attempt = 0; ; attempt++) {
      const { lease, instance } = chosen
      tries.push(lease)
      out.prefill = instance.id
      out.prefillRetries = attempt
      let t: PrefillTry
      try {
        t = await sendPrefill(r, instance, body(instance))
      } finally {
        if (retrying) core.traffic.retrying--
        retrying = false
        lease.release()
      }
      if (t.kind === 'gone' || t.kind === 'shutdown') return t
      let failure: { reason: string; message: string }
      if (t.kind === 'answer' && t.status >= 200 && t.status < 300) {
        ep.recordTry(instance, 'ok')
        const j = judge(t)
        if (j.ok) return { kind: 'ok', value: j.value, instance }
        failure = j
        out.kvParams = j.reason
      } else if (t.kind === 'answer' && t.status < 500) {
        // The request itself was refused (too long a prompt, a bad parameter): every instance
        // would say the same, so the client hears it.
        ep.recordTry(instance, 'ok')
        core.metrics.pd.prefillFailures.inc({ endpoint: ep.name, instance: instance.id, reason: String(t.status) })
        return { kind: 'refused', status: t.status, contentType: t.contentType, body: t.body }
      } else if (t.kind === 'answer') {
        ep.recordTry(instance, t.status === 502 || t.status === 503 || t.status === 504 ? 'gateway' : '5xx')
        failure = { reason: String(t.status), message: `the prefill instance answered ${t.status}` }
      } else {
        ep.recordTry(instance, 'gateway')
        if (t.connect) ep.markDown(instance, `connection failed: ${t.message}`)
        failure = t
      }
      core.metrics.pd.prefillFailures.inc({ endpoint: ep.name, instance: instance.id, reason: failure.reason })
      core.log.warn({ instance: instance.id, reason: failure.reason, err: failure.message, attempt: attempt + 1 }, 'prefill leg failed')
      const next = attempt < core.config.retries.max && (failure.reason === 'connect' || budgetAllows(core)) ? nextPrefill(r, tries) : undefined
      if (next === undefined) return { kind: 'failed', ...failure }
      core.metrics.retries.inc({ instance: instance.id, reason: `prefill_${failure.reason}` })
      chosen = next
      retrying = failure.reason !== 'connect'
      if (retrying) core.traffic.retrying++
    }
  } finally {
    out.prefillMs = performance.now() - started
    core.metrics.pd.legSeconds.observe({ endpoint: ep.name, leg: 'prefill' }, out.prefillMs / 1000)
  }
}

/** Another prefill instance than those tried, or undefined when none is left. */
function nextPrefill(r: PrefillRequest, tries: readonly Lease[]): Chosen<Instance> | undefined {
  const { ep, o } = r
  if (!ep.healthyFor('prefill').some((i) => !tries.some((l) => l.instance === i.id))) return undefined
  try {
    return ep.pick(o.key, o.tenant, o.model, o.anchor, tries, undefined, 'prefill')
  } catch {
    return undefined
  }
}
