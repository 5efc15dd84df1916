// Background probes of an instance: health, the models it serves, and its vLLM metrics.
import { request } from 'undici'
import type { Instance } from './instance.js'

async function get(inst: Instance, path: string, timeoutMs: number): Promise<{ status: number; text: string }> {
  const res = await request(`${inst.url.origin}${inst.basePath}${path}`, {
    dispatcher: inst.probeDispatcher,
    method: 'GET',
    headersTimeout: timeoutMs,
    bodyTimeout: timeoutMs,
    signal: AbortSignal.timeout(timeoutMs),
  })
  return { status: res.statusCode, text: await res.body.text() }
}

/** GET the health path: passed, or why not. */
export async function probeHealth(inst: Instance, path: string, timeoutMs: number): Promise<{ ok: boolean; error: string | undefined }> {
  try {
    const r = await get(inst, path, timeoutMs)
    return r.status === 200 ? { ok: true, error: undefined } : { ok: false, error: `health check answered ${r.status}` }
  } catch (err) {
    return { ok: false, error: `health check failed: ${(err as Error).message}` }
  }
}

/** GET /v1/models: ids of the base model(s) and loaded LoRA adapters. Undefined if unavailable. */
export async function probeModels(inst: Instance, timeoutMs: number): Promise<{ ids: string[]; parents: Map<string, string> } | undefined> {
  try {
    const r = await get(inst, '/v1/models', timeoutMs)
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

/** Sum of a Prometheus counter over all its label sets; undefined when absent. */
export function sumMetric(text: string, name: string): number | undefined {
  let sum: number | undefined
  for (const line of text.split('\n')) {
    if (!line.startsWith(name)) continue
    const rest = line.slice(name.length)
    if (rest[0] !== ' ' && rest[0] !== '{') continue
    const v = Number(rest.slice(rest.lastIndexOf(' ') + 1))
    if (Number.isFinite(v)) sum = (sum ?? 0) + v
  }
  return sum
}

/** vLLM's prefix-cache counters and cache size, from its /metrics. */
export async function probeMetrics(inst: Instance, timeoutMs: number): Promise<void> {
  try {
    const r = await get(inst, '/metrics', timeoutMs)
    if (r.status !== 200) return
    const hits = sumMetric(r.text, 'vllm:prefix_cache_hits_total') ?? sumMetric(r.text, 'vllm:gpu_prefix_cache_hits_total')
    const queries = sumMetric(r.text, 'vllm:prefix_cache_queries_total') ?? sumMetric(r.text, 'vllm:gpu_prefix_cache_queries_total')
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
