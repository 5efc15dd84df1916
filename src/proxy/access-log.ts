// The access log: one `info` line per front request, built when the request ends.
import type { Logger } from 'pino'
import { echo } from '../core/echo.js'
import { tenantHash } from '../request/tenant-hash.js'
import * as line from '../log/log-line.js'
import type { Req } from './types.js'

/** What the handler learns about a request as it goes, for its metrics, log line and spans. */
export interface Outcome {
  requestId: string
  /** The client's X-Request-Id was unusable and requestId is ours. */
  requestIdReplaced: boolean
  endpoint: string
  instance: string
  strategy: string
  status: number
  /** Tries after the first. */
  retries: number
  model: string | undefined
  /** The raw tenant id: only its hash is ever logged. */
  tenant: string | undefined
  /** target or overflow (prefix_aware, longest_prefix), else the strategy's name. */
  decision: string | undefined
  /** performance.now() when the answer's first body byte went to the client. */
  firstByteAt: number | undefined
  /** Request body bytes, when known without counting a stream (a buffered body, or Content-Length). */
  bytesIn: number | undefined
  /** A SageMaker invocation: every answer names the production variant. */
  sagemaker: boolean
  /** A health check (/ping, /health): counted apart from requests. */
  check: '/ping' | '/health' | undefined
  /** What decided the pick, for strategies matching blocks: the instance's KV events (exact) or where prompts went (approximate). */
  view: 'exact' | 'approximate' | undefined
  /** The prompt's blocks of routing key, and how many the chosen instance held. */
  blocks: number | undefined
  heldBlocks: number | undefined
  /**
   * A disaggregated endpoint's request: disaggregated (a prefill leg, then the decode leg),
   * short_uncached (whole on the decode instance, which lacked little), prefill_busier (whole
   * there past the threshold: the prefill instances had more queued), no_prefill_instance,
   * prefill_failed (decode-only after the prefill tries failed).
   */
  pd: string | undefined
  /** The prompt's tokens the decode instance lacked, as the scheduler estimated them. */
  uncachedTokens: number | undefined
  /** The instance that ran the prefill leg (the last one tried), its tries after the first, and how long the leg took. */
  prefill: string | undefined
  prefillRetries: number
  prefillMs: number | undefined
  /** Why the prefill legs' KV parameters could not be used (missing_params, malformed_params, ...), when they could not. */
  kvParams: string | undefined
}

export function newOutcome(requestId: string, requestIdReplaced: boolean): Outcome {
  return {
    requestId,
    requestIdReplaced,
    endpoint: '',
    instance: '',
    strategy: '',
    status: 0,
    retries: 0,
    model: undefined,
    tenant: undefined,
    decision: undefined,
    firstByteAt: undefined,
    bytesIn: undefined,
    sagemaker: false,
    check: undefined,
    view: undefined,
    blocks: undefined,
    heldBlocks: undefined,
    pd: undefined,
    uncachedTokens: undefined,
    prefill: undefined,
    prefillRetries: 0,
    prefillMs: undefined,
    kvParams: undefined,
  }
}

/** The path without its query string, which may carry values that are nobody's business. */
function pathOf(url: string | undefined): string {
  if (url === undefined) return ''
  const q = url.indexOf('?')
  return echo(q === -1 ? url : url.slice(0, q))
}

const ms = (x: number) => Math.round(x * 10) / 10

/** Where a line's fields go: into an object for pino, or as bytes (log-line.ts). */
interface Fields {
  str(key: string, value: string | undefined): void
  num(key: string, value: number | undefined): void
  flag(key: string, value: boolean): void
}

/** The line's fields, in order, each written once for both ways of logging it. */
function fields(f: Fields, req: Req, out: Outcome, status: number, started: number, ended: number, shutdown: boolean): void {
  const proxied = out.instance !== ''
  f.str('requestId', out.requestId)
  f.flag('requestIdReplaced', out.requestIdReplaced)
  f.str('method', req.method)
  f.str('path', pathOf(req.url))
  f.num('status', status)
  f.str('endpoint', out.endpoint || undefined)
  f.str('model', out.model === undefined ? undefined : echo(out.model))
  f.str('tenant', out.tenant === undefined ? undefined : tenantHash(out.tenant))
  f.str('strategy', out.strategy || undefined)
  f.str('instance', proxied ? out.instance : undefined)
  f.str('decision', out.decision)
  f.str('view', out.view)
  f.num('blocks', out.blocks)
  f.num('heldBlocks', out.heldBlocks)
  f.num('retries', proxied ? out.retries : undefined)
  f.str('pd', out.pd)
  f.num('uncachedTokens', out.uncachedTokens)
  f.str('prefill', out.prefill)
  f.num('prefillRetries', out.prefill === undefined ? undefined : out.prefillRetries)
  f.num('prefillMs', out.prefillMs === undefined ? undefined : ms(out.prefillMs))
  f.str('kvParams', out.kvParams)
  f.num('ttfbMs', out.firstByteAt === undefined ? undefined : ms(out.firstByteAt - started))
  f.num('ms', ms(ended - started))
  f.num('bytesIn', out.bytesIn)
  f.str('outcome', shutdown ? 'shutdown' : undefined)
}

/** Gathers the fields into an object: every key, the unset ones undefined (pino leaves those out). */
class FieldObject implements Fields {
  readonly o: Record<string, unknown> = {}
  str(key: string, value: string | undefined): void {
    this.o[key] = value
  }
  num(key: string, value: number | undefined): void {
    this.o[key] = value
  }
  flag(key: string, value: boolean): void {
    this.o[key] = value || undefined
  }
}

/** The line's fields; pino leaves out the undefined ones. */
export function accessLine(req: Req, out: Outcome, status: number, started: number, ended: number, shutdown: boolean): Record<string, unknown> {
  const f = new FieldObject()
  fields(f, req, out, status, started, ended, shutdown)
  return f.o
}

const KEYS = Object.keys(accessLine({ url: '/' } as Req, newOutcome('', false), 0, 0, 0, false))

/**
 * Logs the request's line: the fields of accessLine, in its order, written as pino would
 * write them but without building the object and its strings; through pino when the line
 * cannot be written so (a value needing escaping, a logger that changes its lines).
 */
export function logAccess(log: Logger, req: Req, out: Outcome, status: number, started: number, ended: number, shutdown: boolean): void {
  if (line.begin(log, 'info', KEYS)) {
    fields(line.bytes, req, out, status, started, ended, shutdown)
    if (line.finish(log, 'request')) return
  }
  log.info(accessLine(req, out, status, started, ended, shutdown), 'request')
}
