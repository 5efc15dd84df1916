// Connections to the live instances, opened before the front port opens. undici connects
// lazily: a fresh router's first burst found every instance's pool empty and opened a
// connection per concurrent request (up to upstream.connections each), TCP (and TLS for h2)
// handshakes on the live path with requests queued behind them, in the same second as the
// burst itself. The warm-up cannot do this for it: its throwaway server talks to a sink.
// Each connection is opened by a GET of the health path on the traffic pool (the one the
// requests will use), as the probes do on theirs; the answers are not health signals, so a
// failure here changes nothing but the count in the log.
import { request, type Dispatcher } from 'undici'
import type { Endpoint } from '../fleet/endpoint.js'

export interface PreconnectResult {
  /** Requests answered, so connections open (at most one each). */
  opened: number
  failed: number
}

async function touch(dispatcher: Dispatcher, url: string, timeoutMs: number): Promise<boolean> {
  try {
    // A signal each: one shared by hundreds of requests trips Node's listener-leak warning.
    const res = await request(url, { dispatcher, method: 'GET', signal: AbortSignal.timeout(timeoutMs) })
    await res.body.dump({ limit: 64 * 1024 })
    return true
  } catch {
    return false
  }
}

/**
 * Sends `perInstance` GETs of `path` at once to every instance in rotation, on its traffic
 * pool: a pool whose connections are all busy opens a new one for the next request, so that
 * many connections are open afterwards (fewer with h2c, whose client has one). Resolves within
 * `timeoutMs` whatever the instances do; never throws.
 */
export async function preconnect(endpoints: Iterable<Endpoint>, perInstance: number, path: string, timeoutMs: number): Promise<PreconnectResult> {
  const ms = Math.max(1, timeoutMs)
  const tries: Promise<boolean>[] = []
  const seen = new Set<Dispatcher>()
  for (const ep of endpoints) {
    for (const inst of ep.instances.values()) {
      // An instance in two endpoints has a pool in each; one down would only cost the timeout.
      if (!inst.inRotation || seen.has(inst.dispatcher)) continue
      seen.add(inst.dispatcher)
      const url = `${inst.url.origin}${inst.basePath}${path}`
      for (let i = 0; i < perInstance; i++) tries.push(touch(inst.dispatcher, url, ms))
    }
  }
  const ok = await Promise.all(tries)
  const opened = ok.filter(Boolean).length
  return { opened, failed: ok.length - opened }
}
