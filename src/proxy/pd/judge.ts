// What a prefill leg's answer is worth: the decode leg's KV parameters (vLLM's NixlConnector),
// or why not; and the answer for a prefill instance that refused the request itself.
import { ProxyError } from '../../request/errors.js'
import { cachedTokensOf } from './cached-tokens.js'
import { checkNixlParams, type NixlParams } from './nixl.js'
import type { Judge } from './prefill-leg.js'

/** A prefill instance's answer turned down by the instance itself (a 4xx): passed to the client as it came. */
export class PrefillRefusal extends ProxyError {
  constructor(
    status: number,
    private readonly text: string,
  ) {
    super(status, 'invalid_request_error', 'prefill_refused', 'the prefill instance refused the request')
  }
  override body(): string {
    return this.text
  }
}

export interface NixlValue {
  params: NixlParams
  cached: number | undefined
}

export const judgeNixl: Judge<NixlValue> = ({ contentType, body }) => {
  if (contentType.startsWith('text/event-stream')) return { ok: false, reason: 'streamed_answer', message: 'the prefill instance answered with an event stream, not one JSON answer' }
  let answer: unknown
  try {
    answer = JSON.parse(body.toString('utf8'))
  } catch {
    return { ok: false, reason: 'malformed_params', message: 'the prefill answer is not JSON' }
  }
  const p = checkNixlParams(answer)
  if (!p.ok) return { ok: false, reason: p.reason, message: p.detail }
  return { ok: true, value: { params: p.params, cached: cachedTokensOf(answer) } }
}

