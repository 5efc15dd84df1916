// Instances from DNS: every A and AAAA address of a name (or, with `srv`, every target of
// its SRV records) is an instance, re-resolved every intervalMs. Only an answer changes the
// list: a failed lookup keeps the last one, since a resolver's bad moment is not the fleet
// going away; so does a failed query of one family (A or AAAA) for that family's addresses.
import { lookup } from 'node:dns/promises'
import { Resolver } from 'node:dns/promises'
import type { DnsSourceConfig } from '../../config/discovery.js'
import { DiscoveryError, entry, hostPort, withRole, type DiscoverySource, type InstanceEntry } from './source.js'

/** Timeout of one query to the resolver (c-ares retries once more before failing). */
const QUERY_TIMEOUT_MS = 2000

export class DnsSource implements DiscoverySource {
  readonly #cfg: DnsSourceConfig
  readonly #url: URL
  readonly #resolver: Resolver | undefined
  #timer: NodeJS.Timeout | undefined
  #stopped = false

  constructor(cfg: DnsSourceConfig) {
    this.#cfg = cfg
    this.#url = new URL(cfg.url)
    // Without a server, A/AAAA go through the system's lookup (getaddrinfo: /etc/hosts,
    // search domains); SRV records need a DNS client, which reads /etc/resolv.conf.
    if (cfg.server !== undefined || cfg.srv) {
      this.#resolver = new Resolver({ timeout: QUERY_TIMEOUT_MS, tries: 2 })
      if (cfg.server !== undefined) this.#resolver.setServers([cfg.server])
    }
  }

  /** The instance URL for one address (and port): the configured URL with its host replaced. */
  #instanceUrl(address: string, port: number | string): string {
    const path = this.#url.pathname === '/' ? '' : this.#url.pathname
    return `${this.#url.protocol}//${hostPort(address, port)}${path}`
  }

  get #port(): string {
    return this.#url.port || (this.#url.protocol === 'https:' ? '443' : '80')
  }

  /** The URL's hostname as DNS wants it: IPv6 literal brackets removed. */
  get #name(): string {
    return this.#url.hostname.replace(/^\[|\]$/g, '')
  }

  /** Each query's last answer, by family and name: one that fails answers with it. */
  readonly #lastAnswer = new Map<string, string[]>()

  async #addresses(name: string, failed: string[]): Promise<string[]> {
    if (this.#resolver === undefined) {
      const all = await lookup(name, { all: true })
      return all.map((a) => a.address)
    }
    const families = [
      ['A', this.#resolver.resolve4(name)],
      ['AAAA', this.#resolver.resolve6(name)],
    ] as const
    const answers = await Promise.allSettled(families.map(([, q]) => q))
    // "No such name" or "no records of this family" is an answer (a name with only A records
    // has no AAAA); anything else (a timeout, a refusal) is a failure of that query only: a
    // resolver may answer A and refuse AAAA (dnsmasq with no upstream server does). The
    // failed family counts with its last answer; both failing fail the lookup.
    const code = (r: PromiseRejectedResult) => (r.reason as NodeJS.ErrnoException).code ?? (r.reason as Error).message
    const all: string[] = []
    const failures: { family: string; reason: unknown; kept: string[] }[] = []
    answers.forEach((r, i) => {
      const family = families[i]![0]
      const key = `${family} ${name}`
      if (r.status === 'fulfilled' || ['ENODATA', 'ENOTFOUND'].includes(code(r))) {
        const got = r.status === 'fulfilled' ? r.value : []
        this.#lastAnswer.set(key, got)
        all.push(...got)
      } else {
        const kept = this.#lastAnswer.get(key) ?? []
        failures.push({ family, reason: r.reason, kept })
        all.push(...kept)
      }
    })
    if (failures.length === families.length || (failures.length > 0 && all.length === 0)) throw failures[0]!.reason
    if (all.length === 0) throw (answers[0] as PromiseRejectedResult).reason
    for (const f of failures) failed.push(`the ${f.family} query${name === this.#name ? '' : ` for '${name}'`} failed: ${code({ status: 'rejected', reason: f.reason })}; keeping its last answer (${f.kept.join(', ') || 'none'})`)
    return all
  }

  /** The instances, and what failed on the way (queries answered with their last answer). */
  async resolve(): Promise<{ list: InstanceEntry[]; failed: string[] }> {
    const urls = new Set<string>()
    const failed: string[] = []
    if (this.#cfg.srv) {
      const records = await this.#resolver!.resolveSrv(this.#name)
      const targets = await Promise.all(records.map(async (r) => ({ port: r.port, addresses: await this.#addresses(r.name, failed) })))
      for (const t of targets) for (const a of t.addresses) urls.add(this.#instanceUrl(a, t.port))
    } else {
      for (const a of await this.#addresses(this.#name, failed)) urls.add(this.#instanceUrl(a, this.#port))
    }
    return { list: withRole([...urls].sort().map(entry), this.#cfg.role), failed }
  }

  get #what(): string {
    return `resolving ${this.#cfg.srv ? 'SRV ' : ''}'${this.#name}'${this.#cfg.server ? ` at ${this.#cfg.server}` : ''}`
  }

  start(onChange: (list: InstanceEntry[], partial?: Error) => void, onError: (err: Error) => void): void {
    const tick = async () => {
      try {
        const { list, failed } = await this.resolve()
        if (!this.#stopped) onChange(list, failed.length === 0 ? undefined : new DiscoveryError(`${this.#what}: ${failed.join('; ')}`))
      } catch (err) {
        const e = err as NodeJS.ErrnoException
        if (!this.#stopped) onError(new DiscoveryError(`${this.#what} failed: ${e.code ?? e.message}`))
      }
      if (this.#stopped) return
      this.#timer = setTimeout(() => void tick(), this.#cfg.intervalMs)
      this.#timer.unref()
    }
    void tick()
  }

  async stop(): Promise<void> {
    this.#stopped = true
    clearTimeout(this.#timer)
    this.#resolver?.cancel()
  }
}
