// Instances from DNS: every A and AAAA address of a name (or, with `srv`, every target of
// its SRV records) is an instance, re-resolved every intervalMs. Only an answer changes the
// list: a failed lookup keeps the last one, since a resolver's bad moment is not the fleet
// going away.
import { lookup } from 'node:dns/promises'
import { Resolver } from 'node:dns/promises'
import type { DnsSourceConfig } from './schema.js'
import { DiscoveryError, entry, hostPort, type DiscoverySource, type InstanceEntry } from './source.js'

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

  async #addresses(name: string): Promise<string[]> {
    if (this.#resolver === undefined) {
      const all = await lookup(name, { all: true })
      return all.map((a) => a.address)
    }
    const answers = await Promise.allSettled([this.#resolver.resolve4(name), this.#resolver.resolve6(name)])
    // "No such name" or "no records of this family" is an answer (a name with only A records
    // has no AAAA); anything else (a timeout, a refusal) is a failure, and fails the whole
    // resolution rather than drop the family it hit.
    const absent = (r: PromiseSettledResult<string[]>) => r.status === 'rejected' && ['ENODATA', 'ENOTFOUND'].includes((r.reason as NodeJS.ErrnoException).code ?? '')
    for (const r of answers) if (r.status === 'rejected' && !absent(r)) throw r.reason
    const all = answers.flatMap((r) => (r.status === 'fulfilled' ? r.value : []))
    if (all.length === 0) throw (answers[0] as PromiseRejectedResult).reason
    return all
  }

  async resolve(): Promise<InstanceEntry[]> {
    const urls = new Set<string>()
    if (this.#cfg.srv) {
      const records = await this.#resolver!.resolveSrv(this.#name)
      const targets = await Promise.all(records.map(async (r) => ({ port: r.port, addresses: await this.#addresses(r.name) })))
      for (const t of targets) for (const a of t.addresses) urls.add(this.#instanceUrl(a, t.port))
    } else {
      for (const a of await this.#addresses(this.#name)) urls.add(this.#instanceUrl(a, this.#port))
    }
    return [...urls].sort().map(entry)
  }

  start(onChange: (list: InstanceEntry[]) => void, onError: (err: Error) => void): void {
    const tick = async () => {
      try {
        const list = await this.resolve()
        if (!this.#stopped) onChange(list)
      } catch (err) {
        const e = err as NodeJS.ErrnoException
        if (!this.#stopped) onError(new DiscoveryError(`resolving ${this.#cfg.srv ? 'SRV ' : ''}'${this.#name}'${this.#cfg.server ? ` at ${this.#cfg.server}` : ''} failed: ${e.code ?? e.message}`))
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
