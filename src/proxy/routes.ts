// Front routes. Endpoint-scoped forms map onto the instance's own
// paths: /endpoints/{name}/invocations -> /invocations, /endpoints/{name}/openai/v1/... -> /v1/...

export type Route =
  | { kind: 'ping' }
  | { kind: 'health' }
  | { kind: 'models'; endpoint: string | undefined }
  | { kind: 'invoke'; endpoint: string | undefined; upstreamPath: string }
  | { kind: 'openai'; api: 'chat' | 'completions'; endpoint: string | undefined; upstreamPath: string }

const OPENAI: Record<string, 'chat' | 'completions'> = { '/v1/chat/completions': 'chat', '/v1/completions': 'completions' }

/** The route for a path, and the methods it allows; undefined when no route matches. */
export function matchRoute(url: string): { route: Route; method: 'GET' | 'POST' } | undefined {
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
    if (rest === '/invocations') return { route: { kind: 'invoke', endpoint, upstreamPath: `/invocations${query}` }, method: 'POST' }
    if (!rest.startsWith('/openai/')) return undefined
    rest = rest.slice('/openai'.length)
  } else {
    if (path === '/ping') return { route: { kind: 'ping' }, method: 'GET' }
    if (path === '/health') return { route: { kind: 'health' }, method: 'GET' }
    if (path === '/invocations') return { route: { kind: 'invoke', endpoint, upstreamPath: `/invocations${query}` }, method: 'POST' }
  }
  if (rest === '/v1/models') return { route: { kind: 'models', endpoint }, method: 'GET' }
  const api = OPENAI[rest]
  if (api) return { route: { kind: 'openai', api, endpoint, upstreamPath: `${rest}${query}` }, method: 'POST' }
  return undefined
}
