// Background probes of an instance: health, the models it serves, and its vLLM metrics.
import { setImmediate } from 'node:timers/promises'
import { request, type Dispatcher } from 'undici'
import type { Instance } from './instance.js'
import { CacheMetricsReader, METRICS_PROBE_MAX_BYTES } from './cache-metrics.js'
import { Family, sumSamples } from './load/samples.js'
import { authRefused } from './probe-auth.js'
import { schemeSpoken } from './scheme-probe.js'
import { errorTag, schemeAdvice } from './wrong-scheme.js'
import { PrefixRouterError } from '../core/errors.js'

/** Bytes of an answer read before the probe lets other work run between its chunks. */
const YIELD_AFTER = 256 << 10

/** Bytes of a GET /v1/models answer read at most (thousands of adapters fit). */
export const MODELS_PROBE_MAX_BYTES = 4 << 20

/** The body of a probe's answer, or that it went on past `maxBytes` (not read further). */
export class TooLong extends PrefixRouterError {
  constructor(readonly maxBytes: number) {
    super('ERR_PROBE_TOO_LONG', `more than ${maxBytes} bytes`)
    this.name = 'TooLong'
  }
}

/**
 * GET `url` on a probe's connections: the status and, for a 200, the body given to `read` as
 * it arrives (it returns true to stop reading: the rest is not read, the connection closed);
 * any other answer's body is discarded. Within `timeoutMs`.
 */
async function probeGet(url: string, dispatcher: Dispatcher, timeoutMs: number, authorization: string | undefined, read: (chunk: Buffer) => boolean): Promise<number> {
  const headers = authorization === undefined ? {} : { authorization }
  const res = await request(url, { dispatcher, method: 'GET', headers, headersTimeout: timeoutMs, bodyTimeout: timeoutMs, signal: AbortSignal.timeout(timeoutMs) })
  if (res.statusCode !== 200) {
    // dump() reads a little (128 KiB) to keep the connection, then closes it.
    await res.body.dump()
    return res.statusCode
  }
  // Leaving the loop early destroys the body: undici closes that connection. Past the first
  // YIELD_AFTER bytes, a turn of the event loop between chunks: the chunks a fast sender has
  // queued are otherwise all read in one go (promise jobs), the loop waiting meanwhile.
  let n = 0
  for await (const chunk of res.body as AsyncIterable<Buffer>) {
    if (read(chunk)) break
    if ((n += chunk.length) > YIELD_AFTER) await setImmediate()
  }
  return res.statusCode
}

/** Bytes of a health check's answer read (and thrown away) before its connection is closed instead. */
const HEALTH_MAX_BYTES = 64 << 10

/** A reader that throws the body away, and stops after `maxBytes` (the rest not read). */
function discard(maxBytes: number): (chunk: Buffer) => boolean {
  let n = 0
  return (chunk) => (n += chunk.length) > maxBytes
}

/** A reader that keeps the chunks, up to `maxBytes` (TooLong past them). */
function collect(maxBytes: number): { read: (chunk: Buffer) => boolean; text: () => string } {
  const chunks: Buffer[] = []
  let n = 0
  return {
    read(chunk) {
      n += chunk.length
      if (n > maxBytes) throw new TooLong(maxBytes)
      chunks.push(chunk)
      return false
    },
    text: () => Buffer.concat(chunks).toString(),
  }
}

/** An instance's URL for `path` (after its own path prefix). */
export function instanceUrl(inst: Instance, path: string): string {
  return `${inst.url.origin}${inst.basePath}${path}`
}

/** A probe's GET, with the probe token when the endpoint has one (probeAuth); a refused one is read again. */
async function get(inst: Instance, path: string, timeoutMs: number, read: (chunk: Buffer) => boolean = discard(HEALTH_MAX_BYTES)): Promise<{ status: number }> {
  const token = inst.probeToken
  const status = await probeGet(instanceUrl(inst, path), inst.probeDispatcher, timeoutMs, token?.header, read)
  if (token !== undefined && refused(status)) await token.refresh()
  return { status }
}

const refused = (status: number) => status === 401 || status === 403

/** GET the health path: passed, or why not. */
export async function probeHealth(inst: Instance, path: string, timeoutMs: number): Promise<{ ok: boolean; error: string | undefined }> {
  try {
    const r = await get(inst, path, timeoutMs)
    if (r.status === 200) return { ok: true, error: undefined }
    return { ok: false, error: refused(r.status) ? authRefused(`health check ${path}`, r.status, inst.probeToken) : `health check answered ${r.status}` }
  } catch (err) {
    const speaks = await schemeSpoken(inst.url, err, timeoutMs)
    if (speaks !== undefined) return { ok: false, error: `health check failed: ${schemeAdvice(speaks, inst.url)} (${errorTag(err)})` }
    return { ok: false, error: `health check failed: ${(err as Error).message}` }
  }
}

/** What GET /v1/models found: the models, or an error worth an operator's attention. */
export type ModelsProbe = { ids: string[]; parents: Map<string, string> } | { error: string }

/**
 * GET /v1/models: ids of the base model(s) and loaded LoRA adapters. A refused probe (401,
 * 403: the instance wants an API key) is an error naming the setting; undefined when the
 * instance has no such list (not vLLM) or did not answer.
 */
export async function probeModels(inst: Instance, timeoutMs: number): Promise<ModelsProbe | undefined> {
  try {
    const body$ = collect(MODELS_PROBE_MAX_BYTES)
    const r = await get(inst, '/v1/models', timeoutMs, body$.read)
    if (refused(r.status)) return { error: authRefused('model discovery (GET /v1/models)', r.status, inst.probeToken) }
    if (r.status !== 200) return undefined
    const body = JSON.parse(body$.text()) as { data?: { id?: unknown; parent?: unknown }[] }
    if (!Array.isArray(body.data)) return undefined
    const ids: string[] = []
    const parents = new Map<string, string>()
    for (const m of body.data) {
      if (typeof m?.id !== 'string') continue
      ids.push(m.id)
      if (typeof m.parent === 'string') parents.set(m.id, m.parent)
    }
    return { ids, parents }
  } catch (err) {
    if (err instanceof TooLong) return { error: `model discovery (GET /v1/models) answered ${err.message}; not read` }
    return undefined
  }
}

/** Sum of a Prometheus counter over all its label sets; undefined when absent. */
export function sumMetric(text: string, name: string): number | undefined {
  return sumSamples(Buffer.from(text), new Family(name))
}

/**
 * vLLM's prefix-cache counters and cache size, from its /metrics, read line by line as the
 * page arrives and no further than they (or METRICS_PROBE_MAX_BYTES) go. Returns a problem
 * worth a log line (the page was cut at the bound), else undefined.
 */
export async function probeMetrics(inst: Instance, timeoutMs: number): Promise<string | undefined> {
  const reader = new CacheMetricsReader()
  let cut = false
  try {
    const r = await get(inst, '/metrics', timeoutMs, (chunk) => {
      if (reader.feed(chunk)) return true
      cut = reader.bytes >= METRICS_PROBE_MAX_BYTES
      return cut
    })
    if (r.status !== 200) return undefined
  } catch {
    // Metrics are informational; a failed scrape leaves the last values.
    return undefined
  }
  const m = reader.result()
  if (m.hits !== undefined && m.queries !== undefined && m.queries > 0) inst.kvCacheHitRatio = m.hits / m.queries
  if (m.blocks !== undefined) inst.kvCacheBlocks = m.blocks
  if (m.blockSize !== undefined) inst.kvBlockTokens = m.blockSize
  return cut ? `its /metrics goes on past ${METRICS_PROBE_MAX_BYTES} bytes before the prefix-cache counters and vllm:cache_config_info were all in; read no further` : undefined
}
