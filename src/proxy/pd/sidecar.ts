// serve on a decode pod, as llm-d's routing sidecar: the endpoint picker chose both pods and
// named the prefill one in x-prefiller-host-port; this process, in front of the pod's own vLLM,
// sends the prefill leg there and then the request, with the KV parameters, to its vLLM. The
// picker made the choice, so there is one prefill try: when it fails the request runs whole on
// the pod's vLLM (or is answered 502, with whenNoPrefill fail).
import type { Endpoint } from '../../fleet/endpoint.js'
import { echo } from '../../core/echo.js'
import type { Outcome } from '../access-log.js'
import type { ProxyCore } from '../core.js'
import { badRequest, forbidden, shuttingDown, upstreamFailed } from '../../request/errors.js'
import { PrefillLegFailed, type ClientState } from '../forward.js'
import { proxyTo, type Outbound } from '../tries.js'
import type { Req, Res } from '../types.js'
import { CachedTokensResponse } from './cached-tokens.js'
import { nixlDecodeBody, nixlPrefillBody } from './nixl.js'
import { judgeNixl, PrefillRefusal } from './judge.js'
import { parseHostPort } from './prefill-allow.js'
import type { Instance } from '../../fleet/instance.js'
import type { PrefillPods } from './prefill-pods.js'
import { sendPrefill, type PrefillRequest } from './prefill-leg.js'
import { bootstrapFor, sglangBody } from './sglang.js'

/** The request header the endpoint picker names the prefill pod in (llm-d's). */
export const PREFILLER_HEADER = 'x-prefiller-host-port'

/** The header's prefill pod, checked: malformed is the client's 400, not allowed a 403. */
function podOf(pods: PrefillPods, header: string): Instance {
  const hp = parseHostPort(header)
  if (hp === undefined) throw badRequest('invalid_prefiller', `${PREFILLER_HEADER} must be HOST:PORT; got '${echo(header)}'`)
  if (!pods.allow.allows(hp.host, hp.port)) throw forbidden('prefiller_not_allowed', `the prefill pod '${echo(header)}' is not one this sidecar may send to (sidecar.allow)`)
  return pods.at(hp.host, hp.port)
}

export async function proxySidecar(core: ProxyCore, pods: PrefillPods, ep: Endpoint, req: Req, res: Res, client: ClientState, out: Outcome, o: Outbound & { body: Buffer }, header: string): Promise<number> {
  const pod = podOf(pods, header)
  const d = ep.disaggregation
  out.prefill = pod.id
  out.prefillRetries = 0
  const r: PrefillRequest = { core, ep, req, out, client, o, timeoutMs: d.prefillTimeoutMs }
  const decodeOnly = (reason: string, message: string): Promise<number> => {
    if (d.whenNoPrefill === 'fail') throw upstreamFailed('prefill_failed', `the prefill pod ${pod.id} gave no usable KV parameters: ${reason} (${message})`)
    out.pd = 'prefill_failed'
    core.metrics.pd.requests.inc({ endpoint: ep.name, path: 'prefill_failed' })
    return proxyTo(core, ep, req, res, client, out, o)
  }
  const failed = (reason: string, message: string): void => {
    core.metrics.pd.prefillFailures.inc({ endpoint: ep.name, instance: pod.id, reason })
    core.log.warn({ instance: pod.id, reason, err: message }, 'prefill leg failed')
  }
  const started = performance.now()
  const took = () => {
    out.prefillMs = performance.now() - started
    core.metrics.pd.legSeconds.observe({ endpoint: ep.name, leg: 'prefill' }, out.prefillMs / 1000)
  }
  if (d.connector === 'sglang') {
    // Both legs at once; a prefill failing before the answer starts ends the decode try, and
    // the request is sent again whole.
    const b = bootstrapFor(pod.url, undefined)
    const ac = new AbortController()
    out.pd = 'disaggregated'
    core.metrics.pd.requests.inc({ endpoint: ep.name, path: 'disaggregated' })
    void sendPrefill(r, pod, sglangBody(o.body, b, 'prefill'), ac).then((t) => {
      took()
      if (t.kind === 'gone' || t.kind === 'shutdown' || ac.signal.aborted || (t.kind === 'answer' && t.status < 300)) return
      const reason = t.kind === 'answer' ? String(t.status) : t.reason
      failed(reason, t.kind === 'answer' ? `the prefill pod answered ${t.status}` : t.message)
      if (res.headersSent) return
      const err = new PrefillLegFailed(reason)
      if (client.abort !== undefined) client.abort(err)
      else client.abortNext = err
    })
    try {
      return await proxyTo(core, ep, req, res, client, out, { ...o, body: sglangBody(o.body, b, 'decode') })
    } catch (err) {
      if (!(err instanceof PrefillLegFailed) || res.headersSent) throw err
      return await decodeOnly(err.reason, 'the decode leg was waiting for it')
    } finally {
      client.abortNext = undefined
      ac.abort()
    }
  }
  const t = await sendPrefill(r, pod, nixlPrefillBody(o.body, o.api!))
  took()
  if (t.kind === 'gone') return 499
  if (t.kind === 'shutdown') throw shuttingDown()
  if (t.kind === 'failed') {
    failed(t.reason, t.message)
    return decodeOnly(t.reason, t.message)
  }
  if (t.status >= 400 && t.status < 500) throw new PrefillRefusal(t.status, t.body.toString('utf8'))
  if (t.status >= 500) {
    failed(String(t.status), `the prefill pod answered ${t.status}`)
    return decodeOnly(String(t.status), `the prefill pod answered ${t.status}`)
  }
  const j = judgeNixl(t)
  if (!j.ok) {
    out.kvParams = j.reason
    failed(j.reason, j.message)
    return decodeOnly(j.reason, j.message)
  }
  out.pd = 'disaggregated'
  core.metrics.pd.requests.inc({ endpoint: ep.name, path: 'disaggregated' })
  const answer = j.value.cached === undefined ? res : new CachedTokensResponse(res, j.value.cached)
  return proxyTo(core, ep, req, answer, client, out, { ...o, body: nixlDecodeBody(o.body, j.value.params) })
}
