// node-floor's proxy (Node's HTTP server in front of one undici Pool) with, level by level, the
// work any correct prefix router must do, for bench/ladder.bench.ts: what the router adds above
// the top level is its own, what each level adds above the one below is the price of that work.
// The levels are cumulative:
//   floor    node-floor.mjs itself, so that it is node-floor's work exactly: measured beside
//            node-floor, it shows how far two runs of the same proxy differ.
//   headers  + RFC 9110 section 7.6.1: every end-to-end header forwarded both ways, repeated ones
//            kept; hop-by-hop ones (Connection and what it names, Keep-Alive, Proxy-Connection,
//            TE, Trailer, Transfer-Encoding, Upgrade) and Host dropped; X-Forwarded-For, -Proto
//            and -Host added, and X-Request-Id (the client's, else a random UUID) both ways.
//   route    + the path's API (serve's route table), the routing key from the body and a Router's
//            pick among INSTANCES, the lease released when the answer ends, fails or its client
//            leaves (the upstream request is then aborted); a body with no key is answered 400.
//   metrics  + the four series serve updates per request: the requests counter, and the routing
//            decision, upstream TTFB and request duration histograms (serve's names, labels, buckets).
// Every level forwards to the one upstream: the pick decides, it does not choose a pool.
// PATHS picks the library's code for route and metrics: `public` (default) is what the package
// exports, routingKey() and prom-client's Counter and Histogram; `serve` is what serve runs, the
// native key extraction and the bound metrics, modules of dist/ that are not exported.
// DEBUG_HEADERS=1 adds x-node-proxy-instance and x-node-proxy-in-flight (the instance's leases
// at the pick, this one included) to answers, as serve's debugHeaders do, for tests.
// Usage: node bench/peers/node-proxy.mjs UPSTREAM_URL [floor|headers|route|metrics]; prints "listening <port>".
import { randomUUID } from 'node:crypto'
import http from 'node:http'
import { Pool } from 'undici'

const LEVELS = ['floor', 'headers', 'route', 'metrics']
const [HEADERS, ROUTE, METRICS] = [1, 2, 3]
const upstream = process.argv[2]
const levelName = process.argv[3] ?? 'floor'
const level = LEVELS.indexOf(levelName)
const paths = process.env.PATHS ?? 'public'
const debug = process.env.DEBUG_HEADERS === '1'
const instanceCount = Number(process.env.INSTANCES ?? 4)
const fail = (message) => {
  console.error(`node-proxy: ${message}`)
  process.exit(2)
}
if (!upstream || !/^https?:\/\//.test(upstream)) fail(`UPSTREAM_URL must be an http(s) URL, not ${JSON.stringify(upstream)}`)
if (level < 0) fail(`level must be one of ${LEVELS.join(', ')}, not ${JSON.stringify(levelName)}`)
if (paths !== 'public' && paths !== 'serve') fail(`PATHS must be public or serve, not ${JSON.stringify(paths)}`)
if (!Number.isInteger(instanceCount) || instanceCount < 1 || instanceCount > 64) fail(`INSTANCES must be an integer from 1 to 64, not ${JSON.stringify(process.env.INSTANCES)}`)

const dist = (m) => import(new URL(`../../dist/${m}`, import.meta.url).href)

// Hop-by-hop: they describe one connection (RFC 9110 section 7.6.1). Expect is answered here
// (Node's server sends 100 Continue itself), and undici refuses to send it.
const HOP_BY_HOP = new Set(['connection', 'keep-alive', 'proxy-connection', 'te', 'trailer', 'transfer-encoding', 'upgrade', 'expect'])
// Written by this proxy: from the connection, or from the client's values (X-Forwarded-For is
// appended to, one usable X-Request-Id kept).
const REPLACED = new Set(['host', 'x-forwarded-proto', 'x-forwarded-host', 'x-forwarded-for', 'x-request-id'])
const TENANT_HEADER = 'x-amzn-sagemaker-prefix-aware-id'
const USABLE_ID = /^[\x20-\x7e]{1,200}$/

/** Names a Connection header lists (besides keep-alive and close, which name no header). */
function connectionNames(values) {
  let names
  for (const v of values) {
    for (const t of v.split(',')) {
      const n = t.trim().toLowerCase()
      if (n !== '' && n !== 'close' && n !== 'keep-alive') (names ??= new Set()).add(n)
    }
  }
  return names
}

/**
 * The upstream request's headers as undici's flat [name, value, …] list, from the raw ones so
 * that a repeated header goes on as the client sent it; and the request id and tenant.
 */
function requestHeaders(req) {
  const raw = req.rawHeaders
  let connection
  for (let i = 0; i < raw.length; i += 2) if (raw[i].length === 10 && raw[i].toLowerCase() === 'connection') (connection ??= []).push(raw[i + 1])
  const named = connection && connectionNames(connection)
  const out = []
  let host
  let forwardedFor
  let ids = 0
  let id
  let tenant
  for (let i = 0; i < raw.length; i += 2) {
    const name = raw[i].toLowerCase()
    const value = raw[i + 1]
    if (HOP_BY_HOP.has(name) || named?.has(name)) continue
    if (REPLACED.has(name)) {
      if (name === 'host') host ??= value
      else if (name === 'x-forwarded-for') forwardedFor = forwardedFor === undefined ? value : `${forwardedFor}, ${value}`
      else if (name === 'x-request-id') (ids++, (id = value))
      continue
    }
    // A repeated tenant header is joined, as Node joins most repeated headers.
    if (name === TENANT_HEADER) tenant = tenant === undefined ? value : `${tenant},${value}`
    out.push(name, value)
  }
  const client = req.socket.remoteAddress
  if (client) out.push('x-forwarded-for', forwardedFor === undefined ? client : `${forwardedFor}, ${client}`)
  else if (forwardedFor !== undefined) out.push('x-forwarded-for', forwardedFor)
  out.push('x-forwarded-proto', req.socket.encrypted ? 'https' : 'http')
  if (host !== undefined) out.push('x-forwarded-host', host)
  // One usable id is the client's; none, several or an unprintable one get ours.
  const requestId = ids === 1 && USABLE_ID.test(id) ? id : randomUUID()
  out.push('x-request-id', requestId)
  return { headers: out, requestId, tenant }
}

/** The answer's headers for the client: undici's parsed ones (repeated ones as arrays) less the hop-by-hop ones. */
function responseHeaders(headers, requestId) {
  const c = headers.connection
  const named = c === undefined ? undefined : connectionNames(Array.isArray(c) ? c : [c])
  const out = {}
  for (const name in headers) if (!HOP_BY_HOP.has(name) && !named?.has(name)) out[name] = headers[name]
  out['x-request-id'] = requestId
  return out
}

class Refused extends Error {
  constructor(status, code, message) {
    super(message)
    this.status = status
    this.code = code
  }
}

/** Routing: the key from the body and the pick, through the library's public exports or serve's own modules. */
async function routing() {
  const { Router, RequestError, routingKey } = await dist('index.js')
  const { matchRoute } = await dist('request/routes.js')
  const router = new Router({ instances: Array.from({ length: instanceCount }, (_, i) => ({ id: `instance-${i}` })) })
  const p = router.params
  const keyOptions = { api: 'chat', prefixLength: p.prefixLength, strategy: p.strategy, matchLength: p.matchLength, tenant: undefined }
  const publicPick = (api, body, tenant) => {
    keyOptions.api = api
    keyOptions.tenant = tenant
    const k = routingKey(body, keyOptions)
    return router.pick(k.text ?? k.bytes, { tenant: k.tenant, anchor: k.anchor })
  }
  let pick = publicPick
  if (paths === 'serve') {
    const { nativeRequest, nativeApis } = await dist('core/key/native-key.js')
    const { textSpan } = await dist('core/key/index.js')
    const { tenantOf } = await dist('core/key/tenant.js')
    // maxDepth: serve's default limits.maxJsonDepth.
    const native = { span: textSpan(p.prefixLength, p.strategy, p.matchLength), prefixLength: p.prefixLength, maxDepth: 256, hash: { tenant: undefined, blockBytes: p.strategy === 'longest_prefix' ? p.blockSize : 0 } }
    pick = (api, body, tenant) => {
      if (!nativeApis.includes(api)) return publicPick(api, body, tenant)
      native.hash.tenant = tenant
      const r = nativeRequest(api, body, native)
      // What the scan does not take, the TypeScript path answers (with the exact error), as in serve.
      if (r.status !== 'ok') return publicPick(api, body, tenant)
      return router.pick(r.request.key, { tenant: tenantOf(tenant, r.request.promptCacheKey) })
    }
  }
  return {
    strategy: p.strategy,
    /** The lease for this request and the upstream path; a Refused when the router would answer it with an error. */
    pick(url, body, tenant) {
      const route = matchRoute(url)?.route
      if (route?.kind !== 'openai') throw new Refused(404, 'unsupported_route', `no route for ${url.split('?')[0]}`)
      try {
        return { lease: pick(route.api, body, tenant), path: route.upstreamPath }
      } catch (err) {
        if (err instanceof RequestError) throw new Refused(err.status, err.code, err.message)
        throw err
      }
    },
    inFlight: (id) => router.inFlight(id),
  }
}

/** The per-request series serve keeps (src/metrics/router-metrics.ts), in a registry of their own. */
async function metrics() {
  const { Registry, Counter, Histogram } = await import('prom-client')
  const registers = [new Registry()]
  const requests = { name: 'prefix_router_requests_total', help: 'Requests answered.', labelNames: ['endpoint', 'instance', 'strategy', 'status'], registers }
  const decision = { name: 'prefix_router_routing_decision_seconds', help: 'Time to choose an instance.', labelNames: ['strategy'], buckets: [2.5e-7, 5e-7, 1e-6, 2e-6, 5e-6, 1e-5, 2e-5, 5e-5, 1e-4, 5e-4, 1e-3], registers }
  const ttfb = { name: 'prefix_router_upstream_ttfb_seconds', help: 'Upstream time to first byte.', labelNames: ['instance'], buckets: [0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30], registers }
  const duration = { name: 'prefix_router_request_duration_seconds', help: 'Request duration.', labelNames: ['endpoint', 'status'], buckets: [0.005, 0.01, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60, 120], registers }
  if (paths === 'serve') {
    // serve's own: label values in labelNames order, found without building a labels key.
    const { BoundCounter, BoundHistogram } = await dist('metrics/bound-metrics.js')
    const [r, d, t, u] = [new BoundCounter(requests), new BoundHistogram(decision), new BoundHistogram(ttfb), new BoundHistogram(duration)]
    return {
      decision: (strategy, s) => d.observe([strategy], s),
      ttfb: (instance, s) => t.observe([instance], s),
      done: (instance, strategy, status, s) => {
        r.inc(['default', instance, strategy, status])
        u.observe(['default', status], s)
      },
    }
  }
  const [r, d, t, u] = [new Counter(requests), new Histogram(decision), new Histogram(ttfb), new Histogram(duration)]
  return {
    decision: (strategy, s) => d.observe({ strategy }, s),
    ttfb: (instance, s) => t.observe({ instance }, s),
    done: (instance, strategy, status, s) => {
      r.inc({ endpoint: 'default', instance, strategy, status })
      u.observe({ endpoint: 'default', status }, s)
    },
  }
}

let router
let meter

/** The proxy's own answer (a refusal, an upstream failure), OpenAI-shaped. */
function answer(res, status, code, message, requestId) {
  const body = JSON.stringify({ error: { message, type: status < 500 ? 'invalid_request_error' : 'upstream_error', code } })
  res.writeHead(status, { 'content-type': 'application/json', ...(requestId && { 'x-request-id': requestId }) })
  res.end(body)
}

/** One request through the levels above floor, from its whole body to the end of its answer. */
function proxy(pool, req, res, body, arrived) {
  const { headers, requestId, tenant } = requestHeaders(req)
  let lease
  let path = req.url
  let instance = ''
  let status = 0
  let sent = 0
  let first = true
  let abort
  const end = () => {
    lease?.release()
    meter?.done(instance, router.strategy, status, (performance.now() - arrived) / 1000)
  }
  if (router) {
    const t0 = meter ? performance.now() : 0
    try {
      ;({ lease, path } = router.pick(req.url, body, tenant))
    } catch (err) {
      const r = err instanceof Refused ? err : new Refused(500, 'internal_error', `the pick failed: ${err.message}`)
      status = r.status
      answer(res, r.status, r.code, r.message, requestId)
      return end()
    }
    instance = lease.instance
    meter?.decision(router.strategy, (performance.now() - t0) / 1000)
    // A client that leaves mid-answer ends the upstream request, and with it the lease.
    res.on('close', () => {
      if (!res.writableFinished) abort?.(new Error('client closed the connection'))
    })
  }
  if (meter) sent = performance.now()
  pool.dispatch(
    { path, method: req.method, headers, body },
    {
      onRequestStart(controller) {
        abort = (err) => controller.abort(err)
      },
      onResponseStart(_c, s, h) {
        status = s
        const out = responseHeaders(h, requestId)
        if (debug && lease) {
          out['x-node-proxy-instance'] = lease.instance
          out['x-node-proxy-in-flight'] = String(router.inFlight(lease.instance))
        }
        res.writeHead(s, out)
      },
      onResponseData(_c, chunk) {
        if (first) {
          first = false
          lease?.firstToken()
          meter?.ttfb(instance, (performance.now() - sent) / 1000)
        }
        res.write(chunk)
      },
      onResponseEnd() {
        res.end()
        end()
      },
      onResponseError(_c, err) {
        if (status === 0) {
          status = 502
          answer(res, 502, 'upstream_error', `the upstream failed: ${err.message}`, requestId)
        } else res.destroy(err)
        end()
      },
    },
  )
}

if (level === 0) {
  // node-floor.mjs UPSTREAM_URL 1: one process, as the levels above run.
  process.argv.splice(3, process.argv.length, '1')
  await import('./node-floor.mjs')
} else {
  router = level >= ROUTE ? await routing() : undefined
  meter = level >= METRICS ? await metrics() : undefined
  const pool = new Pool(upstream, { connections: 128 })
  const server = http.createServer({ noDelay: true, keepAliveTimeout: 60_000 }, (req, res) => {
    const arrived = meter ? performance.now() : 0
    const chunks = []
    req.on('data', (c) => chunks.push(c))
    req.on('end', () => proxy(pool, req, res, Buffer.concat(chunks), arrived))
  })
  server.listen(0, '127.0.0.1', () => console.log(`listening ${server.address().port}`))
  process.on('SIGTERM', () => process.exit(0))
}
