// What an operator most often gets wrong pointing the router at instances, recognised from
// the instance URLs and from why the first health probe failed, and said as what to do.
import type { Config } from '../config/config.js'
import { readsKvEvents } from '../config/tokenizer-default.js'
import { v1Suffix } from '../config/upstream-url.js'

/**
 * Instance URLs ending in /v1 (an OpenAI client's base URL): the router puts /v1/... after an
 * instance's URL, so requests would go to /v1/v1/chat/completions.
 */
export function baseUrlWarnings(config: Config): string[] {
  return config.endpoints.flatMap((ep) =>
    ep.instances.flatMap((i) => {
      const bare = v1Suffix(i.url)
      return bare === undefined
        ? []
        : [`${i.url} has the base path /v1, so requests will go to /v1/v1/chat/completions (an OpenAI client's base URL ends in /v1; an instance URL here does not): did you mean ${bare}?`]
    }),
  )
}

/** A tokenizer without KV events is loaded and never used: the exact view is all it serves. */
export function tokenizerWarnings(config: Config): string[] {
  if (config.tokenizer === undefined || readsKvEvents(config)) return []
  return [`--tokenizer ${config.tokenizer.mode} (tokenizer) serves the exact view only, and without --kv-events-port (kvEvents) there is none: it is not used`]
}

/**
 * An instance listed twice (the same URL, a trailing slash aside) is one instance: one
 * weight, one share of the traffic, not two. `firstFrom`: the flag or variable that gave the
 * first endpoint's instances, named instead of the key.
 */
export function duplicateWarnings(config: Config, firstFrom?: string): string[] {
  return config.endpoints.flatMap((ep, n) => {
    const seen = new Set<string>()
    const twice = new Set<string>()
    for (const i of ep.instances) {
      const id = i.url.replace(/\/+$/, '')
      if (seen.has(id)) twice.add(id)
      seen.add(id)
    }
    const where = (id: string) =>
      n === 0 && firstFrom?.startsWith('--') ? `${firstFrom} ${id} given twice` : n === 0 && firstFrom !== undefined ? `${firstFrom} lists ${id} twice` : `endpoint ${ep.name} lists ${id} twice (endpoints[${n}].instances)`
    return [...twice].map((id) => `${where(id)}: it is one instance (one weight, one share of the traffic)`)
  })
}

/** A hint for an instance that failed its first health probe, or undefined when none fits. */
export function unhealthyHint(url: string, lastError: string, config: Config): string | undefined {
  const bare = v1Suffix(url)
  if (/answered 404/.test(lastError)) {
    return bare !== undefined
      ? `the URL ends in /v1, so the health check asked for /v1${config.health.path}; the router adds /v1/... itself: use ${bare}`
      : `nothing answers ${config.health.path} there (vLLM does): is this the server's root URL, and is health.path right?`
  }
  if (/ECONNREFUSED/.test(lastError)) {
    let at = url
    try {
      at = new URL(url).host
    } catch {
      // the URL was validated; keep it whole if not
    }
    return `nothing is listening on ${at}: is the server running (vLLM listens only once its model is loaded), and is the port right?`
  }
  if (/ENOTFOUND|EAI_AGAIN/.test(lastError)) return 'the host name does not resolve'
  if (config.upstream.protocol === 'h2c' && !/answered \d/.test(lastError)) {
    return '--upstream-protocol h2c needs a server that speaks HTTP/2 without TLS; vLLM speaks HTTP/1.1 only: leave out --upstream-protocol (http1 is the default)'
  }
  if (/timeout|aborted/i.test(lastError)) return `no answer within health.timeoutMs (${config.health.timeoutMs} ms): is the server overloaded, or is a firewall dropping packets?`
  return undefined
}
