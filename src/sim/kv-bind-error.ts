// A KV-event socket that cannot be bound, named: which socket (the PUB one or the replay
// ROUTER) and its endpoint. ZeroMQ's own error says only "Address already in use". Apart from
// the publisher, so that the CLI recognises it without loading ZeroMQ.
import { PrefixRouterError } from '../core/errors.js'

export type KvSocketKind = 'pub' | 'replay'

export class KvBindError extends PrefixRouterError {
  constructor(
    readonly socket: KvSocketKind,
    readonly endpoint: string,
    /** The port asked for (0: any free one). */
    readonly port: number,
    cause: unknown,
  ) {
    // The bind's own code (EADDRINUSE, EACCES, EADDRNOTAVAIL), for callers that branch on it.
    super((cause as { code?: string }).code ?? 'ERR_SIM_KV_BIND', `cannot bind the KV events ${socket === 'pub' ? 'PUB' : 'replay'} socket on ${endpoint}: ${(cause as Error).message}`, { cause })
    this.name = 'KvBindError'
  }
}
