// What serve prints once it is up, after the first round of probes: how much of the fleet is
// healthy, why each instance that is not failed (with a hint), and a request to try with a
// model the fleet really serves.
import type { Config } from '../config/config.js'
import type { Endpoint } from '../fleet/endpoint.js'
import type { ProxyServer } from '../proxy/proxy.js'
import { unhealthyHint } from './hints.js'

export function healthReport(proxy: ProxyServer, config: Config): string {
  const eps = [...proxy.endpoints()]
  const lines: string[] = []
  for (const ep of eps) {
    const all = [...ep.instances.values()]
    const up = all.filter((i) => i.inRotation)
    lines.push(`prefix-router: ${up.length} of ${all.length} instances healthy${eps.length > 1 ? ` in endpoint ${ep.name}` : ''}`)
    for (const i of all) {
      if (i.inRotation) continue
      const why = i.lastError ?? (i.outlier.ejected ? 'ejected' : 'down')
      lines.push(`  ${i.id}: ${why}`)
      const hint = unhealthyHint(i.id, why, config)
      if (hint) lines.push(`    ${hint}`)
    }
  }
  return `${lines.join('\n')}\n`
}

/** A model the endpoint serves: one a healthy instance lists first, else any declared or discovered. */
function sampleModel(ep: Endpoint): string | undefined {
  return ep.healthy().flatMap((i) => i.models())[0] ?? ep.models()[0]?.id
}

export function tryIt(proxy: Pick<ProxyServer, 'url' | 'endpoint'>): string {
  const ep = proxy.endpoint(undefined)!
  const model = sampleModel(ep)
  if (model === undefined) {
    return (
      'prefix-router: no model known to try a request with: no healthy instance listed one at GET /v1/models, and the configuration declares none\n' +
      `  (requests name the model your servers serve; ${proxy.url}/v1/models lists what the router knows)\n`
    )
  }
  return (
    `try:\n  curl -s ${proxy.url}/v1/chat/completions -H 'content-type: application/json' \\\n` +
    // A quote in a model's name would end the shell's single-quoted string.
    `    -d '${JSON.stringify({ model, messages: [{ role: 'user', content: 'Hello!' }], max_tokens: 16 }).replaceAll("'", "'\\''")}'\n`
  )
}
