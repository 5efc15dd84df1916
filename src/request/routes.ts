// Front routes. Endpoint-scoped forms map onto the instance's own paths:
// /endpoints/{name}/invocations (and SageMaker's -response-stream form) -> /invocations,
// /endpoints/{name}/openai/v1/... -> /v1/..., /endpoints/{name}/openai/tokenize -> /tokenize.
import type { OpenAIApi } from '../core/key/openai-key.js'

export type Route =
  | { kind: 'ping' }
  | { kind: 'health' }
  | { kind: 'models'; endpoint: string | undefined }
  /** eventStream: SageMaker's InvokeEndpointWithResponseStream, the answer framed as an AWS event stream. */
  | { kind: 'invoke'; endpoint: string | undefined; upstreamPath: string; eventStream: boolean }
  | { kind: 'openai'; api: OpenAIApi; endpoint: string | undefined; upstreamPath: string }
  /** A path under /v1/ the router does not forward; answered 404 with the list below. */
  | { kind: 'unsupported'; path: string }

const OPENAI: Record<string, OpenAIApi> = {
  '/v1/chat/completions': 'chat',
  '/v1/completions': 'completions',
  '/v1/embeddings': 'embeddings',
  '/v1/responses': 'responses',
  '/v1/rerank': 'rerank',
  '/v1/score': 'score',
  '/tokenize': 'tokenize',
  '/detokenize': 'detokenize',
}

/** The OpenAI-shaped routes, as an unsupported path's answer lists them. */
export const OPENAI_ROUTES: readonly string[] = ['GET /v1/models', ...Object.keys(OPENAI).map((p) => `POST ${p}`)]

export type Matched = Readonly<{ route: Readonly<Route>; method: 'GET' | 'POST' }>

// A fleet's clients send a handful of distinct URLs: each is matched once, then found here.
// Bounded, as any client may send any URL: past the bound it starts over, and long URLs are
// matched each time rather than held.
const CACHE_SIZE = 1024
const CACHE_URL_LENGTH = 256
const cache = new Map<string, Matched | undefined>()

/** The route for a path, and the methods it allows; undefined when no route matches. */
export function matchRoute(url: string): Matched | undefined {
  if (url.length > CACHE_URL_LENGTH) return match(url)
  let m = cache.get(url)
  if (m !== undefined || cache.has(url)) return m
  m = match(url)
  if (m !== undefined) Object.freeze(m.route)
  if (cache.size >= CACHE_SIZE) cache.clear()
  cache.set(url, m && Object.freeze(m))
  return m
}

function match(url: string): { route: Route; method: 'GET' | 'POST' } | undefined {
  const q = url.indexOf('?')
  const path = q < 0 ? url : url.slice(0, q)
  const query = q < 0 ? '' : url.slice(q)
  let endpoint: string | undefined
  let rest = path
  const m = /^\/endpoints\/([^/]+)(\/.*)$/.exec(path)
  if (m) {
    try {
      endpoint = decodeURIComponent(m[1]!)
    } catch {
      return undefined // a malformed escape names no endpoint
    }
    rest = m[2]!
    if (rest === '/invocations' || rest === '/invocations-response-stream') {
      // A SageMaker container answers both on /invocations; the stream form only frames the answer.
      return { route: { kind: 'invoke', endpoint, upstreamPath: `/invocations${query}`, eventStream: rest !== '/invocations' }, method: 'POST' }
    }
    if (!rest.startsWith('/openai/')) return undefined
    rest = rest.slice('/openai'.length)
  } else {
    if (path === '/ping') return { route: { kind: 'ping' }, method: 'GET' }
    if (path === '/health') return { route: { kind: 'health' }, method: 'GET' }
    if (path === '/invocations') return { route: { kind: 'invoke', endpoint, upstreamPath: `/invocations${query}`, eventStream: false }, method: 'POST' }
  }
  if (rest === '/v1/models') return { route: { kind: 'models', endpoint }, method: 'GET' }
  const api = OPENAI[rest]
  if (api) return { route: { kind: 'openai', api, endpoint, upstreamPath: `${rest}${query}` }, method: 'POST' }
  // Every OpenAI and vLLM API a client sends a prompt to is a POST.
  if (rest.startsWith('/v1/')) return { route: { kind: 'unsupported', path }, method: 'POST' }
  return undefined
}
