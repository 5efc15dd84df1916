// What is wrong with an instance URL, in words that say how to fix it. Shared by the config
// schema (a file's `instances`) and the flags (`--upstream`), so both say the same thing.

export interface UrlProblem {
  problem: string
  /** The URL the user most likely meant, when there is one. */
  meant?: string
}

/** Why `s` is not an http(s) instance URL, or undefined if it is one. */
export function upstreamUrlProblem(s: string): UrlProblem | undefined {
  // Without a scheme, `new URL('localhost:8000')` parses as scheme 'localhost:', so look for '://' first.
  if (!/^[a-z][a-z0-9+.-]*:\/\//i.test(s)) {
    const guess = `http://${s.replace(/^\/+/, '')}`
    // host:port, a dotted name or address, or localhost: a scheme is all that is missing.
    const hostLike = /^[^/\s]*(:\d+|\.[^/\s]*|localhost)/i.test(s.replace(/^\/+/, ''))
    return { problem: 'must start with http:// or https://', ...(hostLike && canParse(guess) && { meant: guess }) }
  }
  let u: URL
  try {
    u = new URL(s)
  } catch {
    return { problem: 'must be an http:// or https:// URL' }
  }
  if (u.protocol !== 'http:' && u.protocol !== 'https:') return { problem: `must be an http:// or https:// URL, not ${u.protocol}//` }
  if (u.hostname === '') return { problem: 'must be an http:// or https:// URL with a host' }
  return undefined
}

function canParse(s: string): boolean {
  try {
    return new URL(s).hostname !== ''
  } catch {
    return false
  }
}

/**
 * The instance's base path ends in /v1: the OpenAI habit of a base URL with /v1, which here
 * makes requests go to /v1/v1/chat/completions. Returns the URL without it, or undefined.
 */
export function v1Suffix(url: string): string | undefined {
  let u: URL
  try {
    u = new URL(url)
  } catch {
    return undefined
  }
  const path = u.pathname.replace(/\/+$/, '')
  if (!/\/v1$/.test(path)) return undefined
  u.pathname = path.slice(0, -3) || '/'
  return u.toString().replace(/\/$/, '')
}
