// Which prefill pods a sidecar may send a prefill leg to, from the operator's list: the header
// naming the pod comes with the request, so without a list anyone able to set it could make the
// sidecar post bodies to any host and port it can reach.
import { BlockList, isIP } from 'node:net'
import { ConfigError } from '../../config/config.js'

/** host:port as the header carries it ([v6]:port for IPv6), or undefined when it is not that. */
export function parseHostPort(v: string): { host: string; port: number } | undefined {
  const m = /^(?:\[([0-9a-fA-F:.]+)\]|([A-Za-z0-9.-]+)):(\d{1,5})$/.exec(v.trim())
  if (m === null) return undefined
  const port = Number(m[3])
  if (port < 1 || port > 65535) return undefined
  const host = m[1] ?? m[2]!
  if (m[1] !== undefined && isIP(host) !== 6) return undefined
  return { host: host.toLowerCase(), port }
}

export class PrefillAllow {
  readonly any: boolean
  readonly #ranges = new BlockList()
  readonly #hosts: { host: string; port: number | undefined }[] = []

  constructor(entries: readonly string[]) {
    this.any = entries.length === 0
    for (const e of entries) {
      const slash = e.indexOf('/')
      if (slash >= 0) {
        const addr = e.slice(0, slash)
        const bits = Number(e.slice(slash + 1))
        const family = isIP(addr)
        if (family === 0 || !Number.isInteger(bits) || bits < 0 || bits > (family === 4 ? 32 : 128)) throw new ConfigError(`sidecar.allow: '${e}' is not a CIDR range (e.g. 10.0.0.0/8)`)
        this.#ranges.addSubnet(addr, bits, family === 4 ? 'ipv4' : 'ipv6')
        continue
      }
      const hp = parseHostPort(e)
      if (hp !== undefined) this.#hosts.push(hp)
      else if (/^(?:\[[0-9a-fA-F:.]+\]|[A-Za-z0-9.-]+)$/.test(e)) this.#hosts.push({ host: e.replace(/^\[|\]$/g, '').toLowerCase(), port: undefined })
      else throw new ConfigError(`sidecar.allow: '${e}' is not a host, host:port or CIDR range`)
    }
  }

  allows(host: string, port: number): boolean {
    if (this.any) return true
    if (this.#hosts.some((h) => h.host === host && (h.port === undefined || h.port === port))) return true
    const family = isIP(host)
    return family !== 0 && this.#ranges.check(host, family === 4 ? 'ipv4' : 'ipv6')
  }
}
