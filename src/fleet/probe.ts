// Background probes of an instance: health, the models it serves, and its vLLM metrics.
import { request, type Dispatcher } from 'undici'
import type { Instance } from './instance.js'
import { Family, sumSamples } from './load/samples.js'
import { authRefused } from './probe-auth.js'
import { schemeSpoken } from './scheme-probe.js'
import { errorTag, schemeAdvice } from './upstream-url.js'

/**
 * GET `url` on a probe's connections: the status and, for a 200, the body as text (any other
 * answer's body is discarded), within `timeoutMs`.
 */
async function probeGet(url: string, dispatcher: Dispatcher, timeoutMs: number, authorization: string | undefined): Promise<{ status: number; text: string }> {
  const headers = authorization === undefined ? {} : { authorization }
  const res = await request(url, { dispatcher, method: 'GET', headers, headersTimeout: timeoutMs, bodyTimeout: timeoutMs, signal: AbortSignal.timeout(timeoutMs) })
  if (res.statusCode !== 200) {
    await res.body.dump()
    return { status: res.statusCode, text: '' }
  }
  return { status: res.statusCode, text: await res.body.text() }
}

/** An instance's URL for `path` (after its own path prefix). */
export function instanceUrl(inst: Instance, path: string): string {
  return `${inst.url.origin}${inst.basePath}${path}`
}

/** A probe's GET, with the probe token when the endpoint has one (probeAuth); a refused one is read again. */
async function get(inst: Instance, path: string, timeoutMs: number): Promise<{ status: number; text: string }> {
  const token = inst.probeToken
  const r = await probeGet(instanceUrl(inst, path), inst.probeDispatcher, timeoutMs, token?.header)
  if (token !== undefined && refused(r.status)) await token.refresh()
  return r
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
    const r = await get(inst, '/v1/models', timeoutMs)
    if (refused(r.status)) return { error: authRefused('model discovery (GET /v1/models)', r.status, inst.probeToken) }
    if (r.status !== 200) return undefined
    const body = JSON.parse(r.text) as { data?: { id?: unknown; parent?: unknown }[] }
    if (!Array.isArray(body.data)) return undefined
    const ids: string[] = []
    const parents = new Map<string, string>()
    for (const m of body.data) {
      if (typeof m?.id !== 'string') continue
      ids.push(m.id)
      if (typeof m.parent === 'string') parents.set(m.id, m.parent)
    }
    return { ids, parents }
  } catch {
    return undefined
  }
}

const HITS = new Family('vllm:prefix_cache_hits_total')
const QUERIES = new Family('vllm:prefix_cache_queries_total')
const GPU_HITS = new Family('vllm:gpu_prefix_cache_hits_total')
const GPU_QUERIES = new Family('vllm:gpu_prefix_cache_queries_total')

/** Sum of a Prometheus counter over all its label sets; undefined when absent. */
export function sumMetric(text: string, name: string): number | undefined {
  return sumSamples(Buffer.from(text), new Family(name))
}

/** vLLM's prefix-cache counters and cache size, from its /metrics. */
export async function probeMetrics(inst: Instance, timeoutMs: number): Promise<void> {
  try {
    const r = await get(inst, '/metrics', timeoutMs)
    if (r.status !== 200) return
    const body = Buffer.from(r.text)
    const hits = sumSamples(body, HITS) ?? sumSamples(body, GPU_HITS)
    const queries = sumSamples(body, QUERIES) ?? sumSamples(body, GPU_QUERIES)
    if (hits !== undefined && queries !== undefined && queries > 0) inst.kvCacheHitRatio = hits / queries
    const info = /^vllm:cache_config_info\{([^}]*)\}/m.exec(r.text)
    if (info) {
      const blocks = /num_gpu_blocks="(\d+)"/.exec(info[1]!)
      const size = /block_size="(\d+)"/.exec(info[1]!)
      if (blocks) inst.kvCacheBlocks = Number(blocks[1])
      if (size) inst.kvBlockTokens = Number(size[1])
    }
  } catch {
    // Metrics are informational; a failed scrape leaves the last values.
  }
}
