// Shared set-up for discovery tests: a router whose first endpoint finds its instances
// through the given sources, a log to read back, and simulated workers to be found.
import { writeFileSync } from 'node:fs'
import { join } from 'node:path'
import { ProxyServer } from '../../../src/proxy/proxy.js'
import { capturedLog } from '../../faults/log-lines.js'
export { GatedClock } from '../../helpers/gated-clock.js'
import { chat, post, testConfig, until } from '../../proxy/helpers.js'

export const MODEL = 'sim-tiny'

export async function startDiscoveryRouter(discovery: unknown[], opts: { instances?: string[]; config?: Record<string, unknown> } = {}) {
  const { logger, lines } = capturedLog()
  const config = testConfig([{ name: 'default', instances: opts.instances ?? [], discovery }], opts.config)
  const router = await ProxyServer.start(config, { logger })
  return { router, lines, endpoint: router.endpoint(undefined)! }
}

/** Ids of the instances the default endpoint routes to, sorted. */
export function members(router: ProxyServer): string[] {
  return [...router.endpoint(undefined)!.healthy()].map((i) => i.id).sort()
}

/** Each instance of the default endpoint (in rotation or not) as `id role`, sorted. */
export function roles(router: ProxyServer): string[] {
  return [...router.endpoint(undefined)!.instances.values()].map((i) => `${i.id} ${i.role}`).sort()
}

/** Waits until the default endpoint's instances have exactly these roles (`id role` each). */
export async function untilRoles(router: ProxyServer, want: string[]): Promise<void> {
  const w = [...want].sort().join(', ')
  await until(() => roles(router).join(', ') === w, 20_000, `roles ${w} (now ${roles(router).join(', ') || 'none'})`)
}

/** Waits until the default endpoint routes to exactly `ids`. */
export async function untilMembers(router: ProxyServer, ids: string[], what = `members ${ids.join(', ')}`): Promise<void> {
  const want = [...ids].sort().join(' ')
  await until(() => members(router).join(' ') === want, 20_000, `${what} (now ${members(router).join(', ') || 'none'})`)
}

/** The instances that `n` requests with different prompts reached. */
export async function reached(router: ProxyServer, n: number): Promise<Set<string>> {
  const seen = new Set<string>()
  for (let i = 0; i < n; i++) {
    const r = await post(`${router.url}/v1/chat/completions`, chat(`conversation ${i} ${Math.random()}`, { model: MODEL, max_tokens: 1 }))
    if (r.status !== 200) throw new Error(`request ${i} answered ${r.status}: ${r.text}`)
    seen.add(r.headers.get('x-prefix-router-instance')!)
  }
  return seen
}

/** Waits for a log line matching `pred` (beyond the first `from` lines). */
export async function untilLog(lines: Record<string, unknown>[], pred: (l: Record<string, unknown>) => boolean, what: string, from = 0): Promise<Record<string, unknown>> {
  await until(() => lines.slice(from).some(pred), 20_000, what)
  return lines.slice(from).find(pred)!
}

export const membershipChange = (l: Record<string, unknown>) => l.msg === 'discovery: membership changed'
export const sourceFailed = (l: Record<string, unknown>) => l.msg === 'discovery source failed; keeping its last list'


/**
 * A kubeconfig in `dir` pointing at a fake API server (plain HTTP, a bearer token), in
 * `namespace`, made the one the client library reads (KUBECONFIG).
 */
export function useKubeconfig(dir: string, server: string, namespace: string): void {
  const kubeconfig = join(dir, 'kubeconfig')
  writeFileSync(
    kubeconfig,
    [
      'apiVersion: v1',
      'kind: Config',
      // Plain HTTP: the client refuses it unless told TLS is not to be checked.
      'clusters: [{ name: test, cluster: { server: "' + server + '", insecure-skip-tls-verify: true } }]',
      'users: [{ name: tester, user: { token: secret-token } }]',
      `contexts: [{ name: test, context: { cluster: test, user: tester, namespace: ${namespace} } }]`,
      'current-context: test',
      '',
    ].join('\n'),
  )
  process.env.KUBECONFIG = kubeconfig
}
