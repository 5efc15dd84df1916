// The endpoint picker: the fleet runtime serve stands on (endpoints from the configuration,
// probes, discovery, engine load, KV events, the admin port and its metrics: src/runtime)
// behind Envoy's ext_proc protocol on a gRPC port, with grpc.health.v1 beside it. TLS on that
// port when credentials are given (tls.ts), and then grpc.health.v1 on a plaintext port of its
// own as well: the kubelet's gRPC probes do not speak TLS.
import { Server, ServerCredentials, type ServerDuplexStream } from '@grpc/grpc-js'
import { constants as http2constants, type Http2Session } from 'node:http2'
import type { Logger } from 'pino'
import type { Config } from '../config/config.js'
import type { RouterMetrics } from '../metrics/router-metrics.js'
import type { RequestKeying } from '../request/keying.js'
import { Runtime } from '../runtime/runtime.js'
import { Exchange, type BodyMode, type PickerCore } from './exchange.js'
import { healthImplementation, servingStatus, type ServingStatus } from './health.js'
import type { ProcessingRequest, ProcessingResponse } from './messages.js'
import { EppMetrics } from './metrics.js'
import { externalProcessorServer, type Encoded } from './codec.js'
import { healthService } from './protos.js'
import { http2ServersOf, limitResets } from './reset-limit.js'
import { ReloadableTlsCredentials, type KeyPair } from './tls.js'
import { DEFAULT_MAX_STREAMS } from './limits.js'

export interface EppOptions {
  grpcHost: string
  /** 0: any free port. */
  grpcPort: number
  bodyMode: BodyMode
  logger?: Logger
  /** Run one round of probes before the port opens (default true). */
  probeFirst?: boolean
  reloadConfig?: () => Config
  /** TLS on the gRPC port with this pair (replaceable later: reloadTls). Plaintext without. */
  tls?: KeyPair
  /** A plaintext port with grpc.health.v1 only (0: any free port); opened when given. */
  healthPort?: number
  /** Streams a gateway connection may have open at once, advertised in HTTP/2 SETTINGS (default DEFAULT_MAX_STREAMS). */
  maxStreams?: number
}

export { DEFAULT_GRPC_PORT, DEFAULT_HEALTH_PORT } from './ports.js'
export { DEFAULT_MAX_STREAMS } from './limits.js'

export class EppServer implements PickerCore {
  readonly eppMetrics: EppMetrics
  /** Streams open now: each holds its request's lease until it ends. */
  readonly exchanges = new Set<Exchange>()
  /** Streams taken since the start. */
  streamsTaken = 0
  readonly bodyMode: BodyMode
  #grpc: Server
  readonly #maxStreams: number
  /** The gateways' connections: grpc-js's forceShutdown cuts only those it tracks for channelz, which is off. */
  #sessions = new Set<Http2Session>()
  #healthGrpc: Server | undefined
  #healthPort = 0
  #tls: ReloadableTlsCredentials | undefined
  #watchers = new Set<() => void>()
  #port = 0
  #host: string
  #draining = false
  #closed: Promise<void> | undefined
  #shutdown: Promise<void> | undefined

  private constructor(
    readonly runtime: Runtime,
    opts: EppOptions,
  ) {
    this.bodyMode = opts.bodyMode
    // Channelz off: its per-call bookkeeping was a measurable share of each request's CPU, and nothing reads it.
    this.#maxStreams = opts.maxStreams ?? DEFAULT_MAX_STREAMS
    this.#grpc = new Server({ 'grpc.enable_channelz': 0, 'grpc.max_concurrent_streams': this.#maxStreams })
    this.#host = opts.grpcHost
    if (opts.tls) this.#tls = new ReloadableTlsCredentials(opts.tls)
    this.eppMetrics = new EppMetrics(runtime.metrics.registry, () => this.exchanges.size)
  }

  static async start(config: Config, opts: EppOptions): Promise<EppServer> {
    const runtime = await Runtime.start(config, { ...(opts.logger && { logger: opts.logger }), ...(opts.probeFirst !== undefined && { probeFirst: opts.probeFirst }), ...(opts.reloadConfig && { reloadConfig: opts.reloadConfig }) })
    const s = new EppServer(runtime, opts)
    try {
      await s.#listen(opts.grpcHost, opts.grpcPort)
      if (opts.healthPort !== undefined) await s.#listenHealth(opts.grpcHost, opts.healthPort)
    } catch (err) {
      await runtime.close()
      throw err
    }
    return s
  }

  async #listen(host: string, port: number): Promise<void> {
    this.#grpc.addService(externalProcessorServer(), {
      Process: (call: ServerDuplexStream<ProcessingRequest, ProcessingResponse | Encoded>) => {
        const x = new Exchange(this, call, (done) => this.exchanges.delete(done))
        this.streamsTaken++
        if (!x.ended) this.exchanges.add(x)
      },
    })
    this.#grpc.addService(healthService().service, healthImplementation(this, this.#watchers))
    this.#port = await bind(this.#grpc, host, port, this.#tls ?? ServerCredentials.createInsecure())
    for (const h2 of http2ServersOf(this.#grpc)) {
      h2.on('session', (session: Http2Session) => {
        this.#sessions.add(session)
        session.once('close', () => this.#sessions.delete(session))
      })
      limitResets(h2, {
        onGoaway: ({ resets, remote }) => {
          this.eppMetrics.goaways.inc({ reason: 'stream_resets' })
          this.log.info({ resets, remote }, "a gateway connection's stream resets neared Node's HTTP/2 limit: asked it to reconnect (GOAWAY NO_ERROR)")
        },
      })
    }
  }

  async #listenHealth(host: string, port: number): Promise<void> {
    this.#healthGrpc = new Server({ 'grpc.max_concurrent_streams': this.#maxStreams })
    this.#healthGrpc.addService(healthService().service, healthImplementation(this, this.#watchers))
    try {
      this.#healthPort = await bind(this.#healthGrpc, host, port, ServerCredentials.createInsecure())
    } catch (err) {
      this.#grpc.forceShutdown()
      throw Object.assign(err as Error, { healthPort: true })
    }
  }

  /** TLS on the gRPC port, or plaintext. */
  get tls(): boolean {
    return this.#tls !== undefined
  }

  /** SHA-256 fingerprint of the certificate the gRPC port serves now (undefined: plaintext). */
  get tlsFingerprint(): string | undefined {
    return this.#tls?.fingerprint256
  }

  /** The certificate (PEM) the gRPC port serves now, for a client that trusts it. */
  get tlsCertificate(): string | undefined {
    return this.#tls?.pair.cert
  }

  /** New connections get this pair; one that would not serve throws and the old stays. */
  reloadTls(pair: KeyPair): void {
    if (this.#tls === undefined) throw new Error('the gRPC port is plaintext; there is no certificate to replace')
    this.#tls.replace(pair)
  }

  get config(): Config {
    return this.runtime.config
  }
  get log(): Logger {
    return this.runtime.log
  }
  get keying(): RequestKeying {
    return this.runtime.keying
  }
  get metrics(): RouterMetrics {
    return this.runtime.metrics
  }
  get draining(): boolean {
    return this.#draining
  }

  endpoint(name: string | undefined) {
    return this.runtime.endpoint(name)
  }

  /** A request would get an instance now: one ready at least, and not draining. */
  ready(): boolean {
    if (this.#draining) return false
    for (const ep of this.runtime.endpoints()) if (ep.healthy().length > 0) return true
    return false
  }

  health(service: string): ServingStatus {
    return servingStatus(this, service)
  }

  /** host:port of the gRPC port, for a client. */
  get grpcAddress(): string {
    const h = this.#host === '0.0.0.0' || this.#host === '::' ? '127.0.0.1' : this.#host
    return `${h.includes(':') ? `[${h}]` : h}:${this.#port}`
  }

  get grpcPort(): number {
    return this.#port
  }

  /** host:port of the plaintext health port, when it is open. */
  get healthAddress(): string | undefined {
    if (this.#healthGrpc === undefined) return undefined
    const h = this.#host === '0.0.0.0' || this.#host === '::' ? '127.0.0.1' : this.#host
    return `${h.includes(':') ? `[${h}]` : h}:${this.#healthPort}`
  }

  get adminUrl(): string {
    return this.runtime.adminUrl
  }

  /**
   * Graceful stop: readiness answers NOT_SERVING at once, streams are still taken for
   * `delayMs` (the gateway's time to see it), then no new ones; streams open get up to
   * `timeoutMs` to end, and what is left is cut (each releases its lease).
   */
  shutdown(opts: { delayMs: number; timeoutMs: number } = this.config.drain): Promise<void> {
    this.#shutdown ??= this.#drain(opts)
    return this.#shutdown
  }

  async #drain({ delayMs, timeoutMs }: { delayMs: number; timeoutMs: number }): Promise<void> {
    this.#draining = true
    this.runtime.draining = true
    this.log.info({ delayMs, timeoutMs, streams: this.exchanges.size }, 'draining: readiness answers NOT_SERVING')
    await sleep(delayMs)
    // Watch streams never end by themselves: they have reported NOT_SERVING by now.
    for (const stop of [...this.#watchers]) stop()
    await new Promise<void>((resolve) => {
      const t = setTimeout(() => {
        this.log.warn({ streams: this.exchanges.size }, 'drain timeout: cutting the streams still open')
        this.#forceShutdown()
        this.#healthGrpc?.forceShutdown()
        resolve()
      }, timeoutMs)
      t.unref()
      this.#grpc.tryShutdown(() => {
        clearTimeout(t)
        resolve()
      })
    })
    await this.close()
  }

  #forceShutdown(): void {
    this.#grpc.forceShutdown()
    for (const s of this.#sessions) s.destroy(undefined, http2constants.NGHTTP2_CANCEL)
    this.#sessions.clear()
  }

  close(): Promise<void> {
    this.#closed ??= (async () => {
      for (const stop of [...this.#watchers]) stop()
      this.#forceShutdown()
      this.#healthGrpc?.forceShutdown()
      await this.runtime.close()
    })()
    return this.#closed
  }
}

function bind(server: Server, host: string, port: number, creds: ServerCredentials): Promise<number> {
  const where = host.includes(':') ? `[${host}]:${port}` : `${host}:${port}`
  return new Promise<number>((resolve, reject) => {
    server.bindAsync(where, creds, (err, p) => (err ? reject(err) : resolve(p)))
  })
}

function sleep(ms: number): Promise<void> {
  return new Promise((resolve) => setTimeout(resolve, ms))
}
