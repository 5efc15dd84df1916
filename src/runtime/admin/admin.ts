// The admin port (loopback by default): the status page, Prometheus metrics, instance state, reload.
import http from 'node:http'
import type { AddressInfo } from 'node:net'
import { ConfigError, type Config } from '../../config/config.js'
import { ADMIN_MAX_CONNECTIONS } from '../../net/fd-limit.js'
import type { AdminView } from './admin-view.js'
import { h1Options } from '../h1-options.js'
import { adminRoute } from './admin-route.js'
import { strategyInfo } from '../../core/strategies.js'
import type { EngineLoadStatus } from '../../fleet/load/scraper.js'
import { STATUS_PAGE_HEADERS, statusAsset } from './status-page.js'
import { statusReport } from './status-view.js'
import { roleGap } from '../../fleet/roles.js'
import type { RequestTokenizer } from '../../tokens/index.js'

export interface AdminServer {
  readonly address: AddressInfo
  close(): Promise<void>
}

function json(res: http.ServerResponse, status: number, body: unknown): void {
  res.writeHead(status, { 'content-type': 'application/json' })
  res.end(JSON.stringify(body, null, 2))
}

function engineLoadReport(s: EngineLoadStatus | undefined) {
  if (s === undefined) return null
  return { ...s, at: s.at === null ? null : new Date(s.at).toISOString() }
}

/** The exact view's tokenizer (shared by the endpoints): its counters and its last fallback's reason, in words. */
function tokenizerReport(t: RequestTokenizer | undefined) {
  if (t === undefined) return null
  const { lastFailure, lastFailureAt, ...counts } = t.stats()
  return { mode: t.mode, ...counts, lastFailure: lastFailure ?? null, lastFailureAt: lastFailureAt === undefined ? null : new Date(lastFailureAt).toISOString() }
}

export function instancesReport(p: Pick<AdminView, 'endpoints' | 'endpoint' | 'keying'>) {
  return [...p.endpoints()].map((ep) => {
    const live = ep.router.instances()
    const counts = new Map(live.map((i) => [i.id, i.inFlight]))
    const queued = new Map(live.map((i) => [i.id, i.queuedPrefillBlocks]))
    const engine = new Map(live.map((i) => [i.id, i.engineInFlight]))
    const total = [...ep.instances.values()].reduce((n, i) => n + i.requests, 0)
    const { blocks } = strategyInfo(ep.routing.strategy)
    const roles = ep.roleCounts()
    return {
      name: ep.name,
      routing: ep.routing,
      router: ep.router.stats(),
      // Instances by role, and the leg none of them can play while the other's need it (else null).
      roles,
      missingRole: roleGap(roles) ?? null,
      disaggregation: ep.disaggregation,
      // The exact view's tokenizer, when this endpoint routes by it (null: it does not).
      tokenizer: tokenizerReport(p.keying.tokenizerFor(ep)),
      instances: [...ep.instances.values()].map((i) => ({
        id: i.id,
        // prefill, decode or both; the bootstrap port SGLang's connector sends the decode leg (null: unset).
        role: i.role,
        bootstrapPort: i.bootstrapPort ?? null,
        healthy: i.healthy,
        // No discovery list names it any more, but none of the listed instances is healthy yet.
        keptUntilReplacementHealthy: ep.owner?.keptUntilReplaced(i.id) === true,
        // Outlier detection: out of rotation until this time (ISO), then back by probe.
        ejectedUntil: i.outlier.ejected ? new Date(i.outlier.ejectedUntil).toISOString() : null,
        ejections: i.outlier.ejections,
        weight: i.weight,
        inFlight: counts.get(i.id) ?? p.endpoint(ep.name)!.router.inFlight(i.id),
        // A strategy matching blocks: routing-key blocks sent here whose first token has not come back.
        queuedPrefillBlocks: blocks ? (queued.get(i.id) ?? 0) : null,
        models: i.models(),
        requests: i.requests,
        share: total > 0 ? i.requests / total : 0,
        kvCacheHitRatio: i.kvCacheHitRatio ?? null,
        kvCacheBlocks: i.kvCacheBlocks ?? null,
        // Metrics probes whose /metrics went on past its bound (METRICS_PROBE_MAX_BYTES).
        metricsPagesCut: i.metricsPagesCut,
        indexBlocks: blocks ? (i.indexCapacity(ep.routing.blockSize) ?? ep.routing.indexBlocks) : null,
        lastError: i.lastError ?? null,
        // The exact view: the instance's event stream and the blocks it reports holding.
        kvEvents: ep.exact?.status(i.id) ?? null,
        // Load from the engines: what the router adds to inFlight for it (requests of other
        // clients, as its engine reported them), and the last scrape of its /metrics.
        engineInFlight: engine.get(i.id) ?? 0,
        engineLoad: engineLoadReport(ep.load?.status(i.id)),
      })),
    }
  })
}

export async function listenAdmin(p: AdminView, at: Config['admin'], exclusive = false): Promise<AdminServer> {
  const server = http.createServer(h1Options(p.config), (req, res) => {
    void (async () => {
      const path = (req.url ?? '/').split('?')[0]
      const asset = req.method === 'GET' && path !== undefined ? statusAsset(path) : undefined
      if (asset !== undefined) {
        res.writeHead(200, { 'content-type': asset.type, ...STATUS_PAGE_HEADERS })
        res.end(asset.body)
      } else if (req.method === 'GET' && path === '/admin/status') {
        json(res, 200, statusReport(p, instancesReport(p)))
      } else if (req.method === 'GET' && path === '/metrics') {
        const text = await p.metricsText()
        res.writeHead(200, { 'content-type': p.metrics.registry.contentType })
        res.end(text)
      } else if (req.method === 'GET' && path === '/admin/instances') {
        json(res, 200, { endpoints: instancesReport(p) })
      } else if (req.method === 'GET' && path === '/admin/replicas') {
        const share = p.shareLoad
        if (share === undefined) json(res, 409, { error: { message: `replica ${p.replicaId} shares no load: give --share-load redis://HOST:PORT`, type: 'invalid_request_error', code: 'share_load_off' } })
        else json(res, 200, share.report())
      } else if (req.method === 'POST' && path === '/admin/route') {
        const r = await adminRoute(p, req)
        json(res, r.status, r.body)
      } else if (req.method === 'POST' && path === '/admin/reload') {
        try {
          json(res, 200, p.reload())
        } catch (err) {
          const status = err instanceof ConfigError ? 400 : 500
          json(res, status, { error: { message: (err as Error).message, type: 'invalid_config', code: 'invalid_config' } })
        }
      } else {
        json(res, 404, { error: { message: `no admin route for ${req.method} ${path}`, type: 'invalid_request_error', code: 'not_found' } })
      }
    })().catch((err: unknown) => {
      p.log.error({ err }, 'admin request failed')
      if (!res.headersSent) json(res, 500, { error: { message: 'internal error', type: 'server_error', code: 'internal' } })
    })
  })
  // Its own small cap, counted in the descriptors the front leaves free, so that a flood of
  // front connections never locks operators out; the timeouts free slots held by silent clients.
  server.maxConnections = ADMIN_MAX_CONNECTIONS
  await new Promise<void>((res, rej) => server.once('error', rej).listen({ port: at.port, host: at.host, exclusive }, res))
  return {
    address: server.address() as AddressInfo,
    close: () =>
      new Promise<void>((res) => {
        server.closeAllConnections()
        server.close(() => res())
      }),
  }
}
