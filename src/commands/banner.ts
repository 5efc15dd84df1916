// What serve prints once it listens (after the first round of probes, before it serves a
// request): where, each endpoint's strategy, how much of the fleet is healthy, why each instance that is not failed (with a hint), and a request to try with a
// model the fleet really serves. The exact view and the sharing between replicas are said as
// they are at that moment (connected or not, and why), never as configured: their
// connections are made in the background, and the log says when one comes or fails later.
import type { Config } from '../config/config.js'
import { tokenizerSetting } from '../config/tokenizer-default.js'
import { strategyInfo } from '../core/strategies.js'
import type { ShareLoad } from '../fleet/share/share-load.js'
import type { Endpoint } from '../fleet/endpoint.js'
import type { Runtime } from '../runtime/runtime.js'
import { unhealthyHint } from './hints.js'
import { describeRoles, hasRoles, roleGap, roleGapMessage } from '../fleet/roles.js'

/** The first line: how many instances, each endpoint's strategy, in how many processes, where. */
export function listeningLine(runtime: Runtime, url: string, workers: number): string {
  const eps = [...runtime.endpoints()]
  const total = eps.reduce((n, e) => n + e.instances.size, 0)
  const how = eps.length === 1 ? `with ${eps[0]!.routing.strategy}` : `in ${eps.length} endpoints (${eps.map((e) => `${e.name}: ${e.instances.size} with ${e.routing.strategy}`).join('; ')})`
  return `prefix-router: routing ${total} instance(s) ${how}${workers > 1 ? ` in ${workers} worker processes` : ''} on ${url} (admin ${runtime.adminUrl})\n`
}

export function healthReport(runtime: Runtime, config: Config): string {
  const eps = [...runtime.endpoints()]
  const lines: string[] = []
  for (const ep of eps) {
    const all = [...ep.instances.values()]
    const up = all.filter((i) => i.inRotation)
    lines.push(`prefix-router: ${up.length} of ${all.length} instances healthy${eps.length > 1 ? ` in endpoint ${ep.name}` : ''}`)
    lines.push(...rolesReport(ep, eps.length > 1))
    for (const i of all) {
      if (i.inRotation) {
        // Healthy but its models unknown for a reason to fix (a probe refused: probeAuth).
        if (i.discoveryError !== undefined) lines.push(`  ${i.id}: ${i.discoveryError}`)
        continue
      }
      const why = i.lastError ?? (i.outlier.ejected ? 'ejected' : 'down')
      lines.push(`  ${i.id}: ${why}`)
      const hint = unhealthyHint(i.id, why, config)
      if (hint) lines.push(`    ${hint}`)
    }
  }
  return `${lines.join('\n')}\n`
}

/**
 * For an endpoint whose instances have roles: how many play each, how requests split over
 * them, and a warning when a leg has no instance. Nothing for one whose instances all do both.
 */
export function rolesReport(ep: Endpoint, named: boolean): string[] {
  const n = ep.roleCounts()
  if (!hasRoles(n)) return []
  const d = ep.disaggregation
  const lines = [`prefix-router: ${describeRoles(n)}${named ? ` in endpoint ${ep.name}` : ''}, disaggregated with ${d.connector}, ${d.order}, threshold ${d.threshold} tokens`]
  const gap = roleGap(n)
  if (gap !== undefined) lines.push(`prefix-router: warning: ${roleGapMessage(ep.name, n, gap, d.whenNoPrefill)}`)
  return lines
}

/** A model the endpoint serves: one a healthy instance lists first, else any declared or discovered. */
function sampleModel(ep: Endpoint): string | undefined {
  return ep.healthy().flatMap((i) => i.models())[0] ?? ep.models()[0]?.id
}

export function tryIt(front: { url: string } & Pick<Runtime, 'endpoint'>): string {
  const ep = front.endpoint(undefined)!
  const model = sampleModel(ep)
  if (model === undefined) {
    return (
      'prefix-router: no model known to try a request with: no healthy instance listed one at GET /v1/models, and the configuration declares none\n' +
      `  (requests name the model your servers serve; ${front.url}/v1/models lists what the router knows)\n`
    )
  }
  return (
    `try:\n  curl -s ${front.url}/v1/chat/completions -H 'content-type: application/json' \\\n` +
    // A quote in a model's name would end the shell's single-quoted string.
    `    -d '${JSON.stringify({ model, messages: [{ role: 'user', content: 'Hello!' }], max_tokens: 16 }).replaceAll("'", "'\\''")}'\n`
  )
}

/**
 * Per endpoint with KV events: how many publishers are reached and views trusted, and the
 * tokenizer in force; a line per publisher not reached, with why.
 */
export function exactReport(runtime: Runtime): string {
  const eps = [...runtime.endpoints()]
  const lines: string[] = []
  const t = tokenizerSetting(runtime.config)
  const tokenizer = t === undefined ? 'no tokenizer' : `tokenizer ${t.tokenizer.mode}${t.implied ? " (the default: each request's token ids from an instance's POST /tokenize; --tokenizer local spares the round trip)" : ''}`
  for (const ep of eps) {
    const view = ep.exact
    if (view === undefined) continue
    const ids = view.ids()
    const states = ids.map((id) => [id, view.status(id)!] as const)
    const pubs = states.flatMap(([id, st]) => st.publishers.map((p) => ({ id, ...p })))
    const reached = pubs.filter((p) => p.connected).length
    const fresh = states.filter(([, st]) => st.view === 'fresh').length
    const where = eps.length > 1 ? ` in endpoint ${ep.name}` : ''
    const routes = strategyInfo(ep.routing.strategy).exactView ? '' : ` (read only: ${ep.routing.strategy} does not route by it)`
    const why = new Map<string, number>()
    for (const [, st] of states) if (st.view !== 'fresh' && st.staleReason !== null && reached === pubs.length) why.set(st.staleReason, (why.get(st.staleReason) ?? 0) + 1)
    const distrusted = why.size === 0 ? '' : ` (${[...why].map(([w, n]) => `${n}: ${w}`).join('; ')})`
    const state = ids.length === 0 ? 'no healthy instance to subscribe to yet' : `${reached} of ${pubs.length} publishers reached, ${fresh} of ${ids.length} views trusted${distrusted}`
    lines.push(`prefix-router: exact view (KV events)${where}${routes}: ${state}; ${tokenizer}`)
    for (const p of pubs) if (!p.connected) lines.push(`  ${p.id}: publisher ${p.endpoint} not reached${p.unreachable === null ? ` yet (ZeroMQ retries; a warning follows if it is still not reached ${view.config.connectWarnMs} ms after subscribing)` : `: ${p.unreachable}`}`)
  }
  return lines.length === 0 ? '' : `${lines.join('\n')}\n`
}

/** Sharing queued prefill between replicas: said only once Redis is connected; else why not. */
export function shareReport(share: ShareLoad | undefined): string {
  if (share === undefined) return ''
  const r = share.report()
  if (r.connected) return `prefix-router: sharing queued prefill with the other replicas through ${r.url} (channel ${r.channel}) as replica ${r.replica}; see /admin/replicas\n`
  const why = share.downReason === undefined ? 'still connecting' : `cannot reach it: ${share.downReason}`
  return `prefix-router: NOT sharing queued prefill yet: Redis at ${r.url} is not connected (${why}); routing on this replica's own counts until it is, retrying in the background (channel ${r.channel}, replica ${r.replica}); see /admin/replicas\n`
}
