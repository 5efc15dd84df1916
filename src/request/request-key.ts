// An OpenAI body's routing key, as serve reads it and as the endpoint picker (src/epp) reads
// it: the limits the body is read under and the key, tenant, model and anchor the pick takes.
// One module for both fronts, so that the same body is routed the same way behind either.
import type { Logger } from 'pino'
import type { Config } from '../config/config.js'
import type { Endpoint } from '../fleet/endpoint.js'
import { echo, MAX_MODEL_CHARS, modelTooLong } from '../core/echo.js'
import { requestKey, textSpan, type RoutingKey } from '../core/key/index.js'
import { tenantHeaderValue, tenantOf } from '../core/key/tenant.js'
import { strategyInfo } from '../core/strategies.js'
import type { OpenAIBody, OpenAIBodyLimits } from './openai-body.js'

/** The limits an OpenAI body is read and parsed under for the endpoint's routing. */
export function openAILimits(config: Config, routing: Endpoint['routing'], tenantHeader: string | string[] | undefined): OpenAIBodyLimits {
  const { maxJsonDepth: maxDepth, maxBodyBytes: maxBytes } = config.limits
  const span = textSpan(routing.prefixLength, routing.strategy, routing.matchLength)
  // Logging the routing text needs it as a string, which only openAIRequest builds.
  const prefixLength = config.log.prompts ? undefined : routing.prefixLength
  // The pick's hashes are made in the scan, while the text is in cache; the tenant header is
  // known already (tenantOf checks it after the read, as before). The chain only for a
  // strategy matching blocks.
  const hash = { tenant: tenantHeaderValue(tenantHeader), blockBytes: strategyInfo(routing.strategy).blocks ? routing.blockSize : 0 }
  return { maxBytes, maxDepth, span, prefixLength, hash }
}

export interface RequestKey {
  key: Uint8Array | string
  tenant: string | undefined
  model: string | undefined
  anchor: number | undefined
  /** The client asked for a streamed answer. */
  stream: boolean
}

/** The pick's arguments from a parsed OpenAI body and the request's tenant header. */
export function requestKeyOf(config: Config, log: Logger, endpoint: string, tenantHeader: string | string[] | undefined, read: OpenAIBody): RequestKey {
  let k: RoutingKey
  if (read.native) {
    // The extracted key carries its own anchor; the pick reads it from there.
    const n = read.native
    k = { bytes: n.key, tenant: tenantOf(tenantHeader, n.promptCacheKey), anchor: undefined, model: n.model, stream: n.stream }
  } else {
    k = requestKey(read.request, { tenant: tenantHeader })
    if (config.log.prompts) log.info({ endpoint, model: k.model === undefined ? undefined : echo(k.model), text: read.request.text.slice(0, 2000) }, 'routing text')
  }
  // Refused before the pick, whose 404 for an unknown model and the access log would repeat it.
  if (k.model !== undefined && k.model.length > MAX_MODEL_CHARS) throw modelTooLong(k.model.length)
  return { key: k.text ?? k.bytes, tenant: k.tenant, model: k.model, anchor: k.anchor, stream: k.stream }
}
