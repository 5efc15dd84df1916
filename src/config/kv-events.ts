// Where each instance publishes its KV-cache events, as the configuration says it: a port on
// the instance's own host (vLLM's default `tcp://*:5557`: the router connects to
// tcp://<instance host>:5557), an offset from the instance's own port for fleets that share a
// host (`+500`: the instance on 18001 publishes on 18501), or an address given per instance.
// vLLM's data-parallel rank r publishes on the port + r (and replays on the replay port + r).
import { z } from 'zod'

/** A port, or an offset from the instance's port ("+500", "-100"). */
export type PortRule = { port: number } | { offset: number }

const MAX_PORT = 65535

export const portRule = z.union([z.number(), z.string()]).transform((v, ctx): PortRule => {
  const s = String(v).trim()
  if (/^[+-]\d{1,5}$/.test(s)) return { offset: Number(s) }
  if (/^\d{1,5}$/.test(s) && Number(s) >= 1 && Number(s) <= MAX_PORT) return { port: Number(s) }
  ctx.addIssue({ code: 'custom', message: 'must be a port from 1 to 65535, or an offset from the instance\'s port such as +500' })
  return z.NEVER
})

const zmqTcp = z.string().regex(/^tcp:\/\/(\[[0-9A-Fa-f:.]+\]|[^\s:/[\]]+):\d{1,5}$/, 'must be tcp://HOST:PORT')

export const KvEventsSchema = z
  .object({
    port: portRule,
    /** vLLM's replay_endpoint (a ROUTER socket): missed batches are asked for there. */
    replayPort: portRule.optional(),
    topic: z.string().max(256).default(''),
    /** Data-parallel ranks per instance: rank r publishes on port + r. */
    dataParallelRanks: z.number().int().min(1).max(64).default(1),
    /** After events were lost for good, the instance's view is distrusted (the approximate estimate routes for it) this long. */
    resyncMs: z.number().int().min(0).max(3_600_000).default(30_000),
    /** A publisher not reached (no ZeroMQ handshake) this long after subscribing, or after losing it, is warned of, naming its address. */
    connectWarnMs: z.number().int().min(100).max(600_000).default(5000),
    /**
     * The largest KV-event message accepted, per ZeroMQ frame: a larger one is refused unread
     * (that batch is lost). Decoding one message is one turn of the event loop, so this also
     * bounds the longest such turn (25-50 ms for 1 MiB on 2 shared cores).
     */
    maxMessageBytes: z.number().int().min(65_536).max(268_435_456).default(1024 * 1024),
  })
  .strict()

export type KvEventsConfig = z.infer<typeof KvEventsSchema>

/** An instance's own publisher addresses, overriding the port rules. */
export const InstanceKvEventsSchema = z.object({ endpoint: zmqTcp, replayEndpoint: zmqTcp.optional() }).strict()
export type InstanceKvEvents = z.infer<typeof InstanceKvEventsSchema>

export interface PublisherAddress {
  rank: number
  endpoint: string
  replayEndpoint: string | undefined
}

function portOf(rule: PortRule, instancePort: number): number {
  return 'port' in rule ? rule.port : instancePort + rule.offset
}

function withPort(endpoint: string, delta: number): string {
  const i = endpoint.lastIndexOf(':')
  return `${endpoint.slice(0, i)}:${Number(endpoint.slice(i + 1)) + delta}`
}

/** The instance URL's port, with the scheme's default when it names none. */
function urlPort(u: URL): number {
  if (u.port !== '') return Number(u.port)
  return u.protocol === 'https:' ? 443 : 80
}

/**
 * The publisher addresses of one instance, one per data-parallel rank; throws a RangeError
 * naming the instance when a rule lands outside the port range.
 */
export function publisherAddresses(instanceUrl: string, cfg: KvEventsConfig, own?: InstanceKvEvents): PublisherAddress[] {
  const out: PublisherAddress[] = []
  const u = new URL(instanceUrl)
  const host = u.hostname // IPv6 keeps its brackets here, as ZeroMQ's tcp:// wants them
  for (let rank = 0; rank < cfg.dataParallelRanks; rank++) {
    let endpoint: string
    let replay: string | undefined
    if (own !== undefined) {
      endpoint = withPort(own.endpoint, rank)
      replay = own.replayEndpoint === undefined ? undefined : withPort(own.replayEndpoint, rank)
    } else {
      const port = portOf(cfg.port, urlPort(u)) + rank
      endpoint = `tcp://${host}:${port}`
      replay = cfg.replayPort === undefined ? undefined : `tcp://${host}:${portOf(cfg.replayPort, urlPort(u)) + rank}`
    }
    for (const e of [endpoint, replay]) {
      if (e === undefined) continue
      const p = Number(e.slice(e.lastIndexOf(':') + 1))
      if (!(p >= 1 && p <= MAX_PORT)) throw new RangeError(`KV events of ${instanceUrl} (rank ${rank}): port ${p} is outside 1-65535`)
    }
    out.push({ rank, endpoint, replayEndpoint: replay })
  }
  return out
}
