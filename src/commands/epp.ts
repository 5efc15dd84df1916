// `prefix-router epp`: the router as a Gateway API inference extension endpoint picker. The
// gateway (Envoy's ext_proc filter) asks it, over gRPC, where each request goes; it picks with
// serve's strategies on serve's fleet (the same flags and configuration file) and names the
// instance. TLS on the gRPC port by default, as the reference picker (a pair given, or a
// self-signed certificate made at start), with gRPC health in plaintext on a port of its own.
// gRPC's packages are optional: they are loaded once they have been looked for, with every
// other optional package the configuration needs, so that --help needs none of them.
import { ConfigError, type Config } from '../config/config.js'
import { TokenizerLoadError } from '../core/errors.js'
import type { BodyMode } from '../epp/exchange.js'
import { DEFAULT_GRPC_PORT, DEFAULT_HEALTH_PORT } from '../epp/ports.js'
import { DEFAULT_MAX_STREAMS, MAX_STREAMS_LIMIT } from '../epp/limits.js'
import type { EppServer } from '../epp/server.js'
import type { KeyPair } from '../epp/tls.js'
import { featuresOf } from '../config/optional-features.js'
import { requireFeatures } from '../core/optional-packages.js'
import { routerLogger } from '../log/logger.js'
import { joinBootstrapPorts } from './role-flags.js'
import { outliveClosedPipes } from '../command-line/closed-pipes.js'
import { exactReport, healthReport } from './banner.js'
import { CliError } from '../command-line/cli-error.js'
import { parseFlags } from '../command-line/parse-flags.js'
import { EPP_FLAGS, EPP_OWN_FLAGS } from './epp-flags.js'
import { ENV_PREFIX, helpLines, parseArgsOptions } from './flags.js'
import { listenError } from '../command-line/listen-error.js'
import { buildConfig, buildForStart, type BuiltConfig, type ServeFlags } from './serve-config.js'
import { version } from './version.js'

const HELP = `usage: prefix-router epp (--upstream URL ... | --config FILE) [options]

The endpoint picker of a Gateway API inference gateway: answers Envoy's ext_proc requests on a
gRPC port (TLS by default: a self-signed certificate unless --grpc-tls-cert/--grpc-tls-key
give one) with the instance each request should go to, picked by the router's strategies, and
gRPC health checks beside them, also in plaintext on --grpc-health-port for the kubelet's
probes. Metrics and /admin on the admin port.

${helpLines(EPP_FLAGS, [
  { usage: '--help, -h', help: 'this text' },
  { usage: '--version, -v', help: 'the version of prefix-router' },
])}

Every flag but --help and --version has the environment variable in brackets as its twin;
any other ${ENV_PREFIX}* variable is refused. Precedence: defaults < config file < environment < flags.
SIGHUP re-reads the configuration and the --grpc-tls-cert/--grpc-tls-key pair (new connections
get it; a pair that does not load is logged and the old one stays).
SIGTERM drains: readiness answers NOT_SERVING, streams open get to finish, then it exits.
`

const NO_UPSTREAM = `no instances to pick from. Give your vLLM instances with one of:
  --upstream http://HOST:8000                       (repeat for each instance)
  PREFIX_ROUTER_UPSTREAMS=http://HOST1:8000,http://HOST2:8000
  --config FILE                                     with endpoints: [{ name: default, instances: [http://HOST:8000] }]`

const GRPC_WHY: Record<string, string> = {
  EADDRINUSE: 'address already in use',
  EACCES: 'permission denied (ports below 1024 need privileges)',
  EADDRNOTAVAIL: 'no such address on this machine',
}

export interface EppSettings {
  grpcHost: string
  grpcPort: number
  bodyMode: BodyMode
  /** TLS on the gRPC port: a pair from files (tlsFiles) or, without, a self-signed one. */
  tls: boolean
  tlsFiles?: { cert: string; key: string; certFrom: string; keyFrom: string }
  /** The plaintext health port; undefined: none. */
  healthPort?: number
  /** Streams open at once on one gateway connection. */
  maxStreams: number
}

/** The picker's own settings, flag over variable over default; a bad value is one line naming it. */
export function eppSettings(flags: ServeFlags, env: NodeJS.ProcessEnv = process.env): EppSettings {
  const given = (name: string): { value: string; from: string } | undefined => {
    const spec = EPP_OWN_FLAGS.find((f) => f.name === name)!
    const f = flags[name]
    if (f !== undefined) return { value: String(f), from: `--${name}` }
    const e = env[spec.env]
    return e !== undefined && e !== '' ? { value: e, from: spec.env } : undefined
  }
  const portOf = (g: { value: string; from: string }): number => {
    if (!/^\d+$/.test(g.value) || Number(g.value) > 65535) throw new CliError(`${g.from} must be a port, 0-65535; got '${g.value}'`)
    return Number(g.value)
  }
  const port = given('grpc-port')
  const grpcPort = port === undefined ? DEFAULT_GRPC_PORT : portOf(port)
  const tlsGiven = given('grpc-tls')
  if (tlsGiven !== undefined && tlsGiven.value !== 'on' && tlsGiven.value !== 'off') throw new CliError(`${tlsGiven.from} must be on or off; got '${tlsGiven.value}'`)
  const tls = tlsGiven?.value !== 'off'
  const cert = given('grpc-tls-cert')
  const key = given('grpc-tls-key')
  if ((cert === undefined) !== (key === undefined)) throw new CliError(`${cert?.from ?? '--grpc-tls-cert'} and ${key?.from ?? '--grpc-tls-key'} go together; got only ${(cert ?? key)!.from}`)
  if (cert !== undefined && !tls) throw new CliError(`${cert.from} and ${key!.from} go with TLS; got ${tlsGiven!.from} off`)
  for (const f of [cert, key]) if (f !== undefined && f.value.trim() === '') throw new CliError(`${f.from} must be a file; got ''`)
  const health = given('grpc-health-port')
  const healthPort = health !== undefined ? portOf(health) : tls ? DEFAULT_HEALTH_PORT : undefined
  if (healthPort !== undefined && healthPort !== 0 && healthPort === grpcPort) throw new CliError(`the gRPC port and the health port are both ${grpcPort}; give --grpc-health-port or --grpc-port another`)
  const host = given('grpc-host')
  if (host !== undefined && host.value.trim() === '') throw new CliError(`${host.from} must be an address; got '${host.value}'`)
  const streams = given('grpc-max-streams')
  if (streams !== undefined && (!/^\d+$/.test(streams.value) || Number(streams.value) < 1 || Number(streams.value) > MAX_STREAMS_LIMIT)) throw new CliError(`${streams.from} must be an integer from 1 to ${MAX_STREAMS_LIMIT}; got '${streams.value}'`)
  const mode = given('body-mode')
  if (mode !== undefined && mode.value !== 'streamed' && mode.value !== 'buffered') throw new CliError(`${mode.from} must be streamed or buffered; got '${mode.value}'`)
  return {
    grpcHost: host?.value ?? '0.0.0.0',
    grpcPort,
    bodyMode: (mode?.value as BodyMode | undefined) ?? 'streamed',
    maxStreams: streams === undefined ? DEFAULT_MAX_STREAMS : Number(streams.value),
    tls,
    ...(cert !== undefined && { tlsFiles: { cert: cert.value, key: key!.value, certFrom: cert.from, keyFrom: key!.from } }),
    ...(healthPort !== undefined && { healthPort }),
  }
}

/** The pair the gRPC port serves: the files given (a problem is one line naming the flags) or a new self-signed one. */
async function tlsPair(settings: EppSettings): Promise<KeyPair | undefined> {
  if (!settings.tls) return undefined
  const { readPair, selfSignedPair } = await import('../epp/tls.js')
  const f = settings.tlsFiles
  if (f === undefined) return selfSignedPair()
  try {
    return readPair(f.cert, f.key)
  } catch (err) {
    throw new CliError(`${f.certFrom}/${f.keyFrom}: ${(err as Error).message}`)
  }
}

/** The start line's word on the gRPC port's transport and the health port. */
function transport(epp: EppServer, settings: EppSettings): string {
  const tls = !epp.tls ? 'plaintext' : `TLS, ${settings.tlsFiles ? `certificate ${settings.tlsFiles.cert}` : 'self-signed certificate'} sha256 ${epp.tlsFingerprint}`
  return epp.healthAddress === undefined ? tls : `${tls}; health in plaintext on grpc://${epp.healthAddress}`
}

export async function run(argv: string[]): Promise<number> {
  const { values } = parseFlags(joinBootstrapPorts(argv), { ...parseArgsOptions(EPP_FLAGS), help: { type: 'boolean', short: 'h' }, version: { type: 'boolean', short: 'v' } })
  const { help, version: showVersion, ...flags } = values
  if (help) {
    process.stdout.write(HELP)
    return 0
  }
  if (showVersion) {
    process.stdout.write(`${version()}\n`)
    return 0
  }
  outliveClosedPipes()
  const settings = eppSettings(flags)
  const built = buildForStart(flags)
  requireFeatures(['epp', ...featuresOf(built.config)])
  if (!built.hasUpstreams) throw new CliError(NO_UPSTREAM)
  const { config } = built
  if (settings.grpcPort !== 0 && settings.grpcPort === config.admin.port) throw new CliError(`the gRPC port and the admin port are both ${settings.grpcPort}; give --admin-port or --grpc-port another`)
  if (settings.healthPort !== undefined && settings.healthPort !== 0 && settings.healthPort === config.admin.port) throw new CliError(`the health port and the admin port are both ${settings.healthPort}; give --admin-port or --grpc-health-port another`)
  const pair = await tlsPair(settings)
  const [{ setLogger }, { EppServer }, { readPair }] = await Promise.all([import('@grpc/grpc-js'), import('../epp/server.js'), import('../epp/tls.js')])
  const reloadConfig = (): Config => {
    try {
      return buildConfig(flags).config
    } catch (err) {
      throw err instanceof CliError ? new ConfigError(err.message) : err
    }
  }
  // grpc-js writes its own errors to stderr (a failed bind among them): into the log instead,
  // so that stderr keeps one line per failure.
  const logger = routerLogger(config.log)
  setLogger({ error: (...a: unknown[]) => logger.warn({ grpc: a.map(String).join(' ') }, 'grpc-js'), info: (...a: unknown[]) => logger.debug({ grpc: a.map(String).join(' ') }, 'grpc-js'), debug: () => undefined })
  let epp: EppServer
  try {
    const { grpcHost, grpcPort, bodyMode, healthPort, maxStreams } = settings
    epp = await EppServer.start(config, { grpcHost, grpcPort, bodyMode, maxStreams, reloadConfig, logger, ...(pair && { tls: pair }), ...(healthPort !== undefined && { healthPort }) })
  } catch (err) {
    if (err instanceof TokenizerLoadError) throw new CliError(`the tokenizer (--tokenizer local, --tokenizer-path) does not load: ${err.message}`)
    const e = err as NodeJS.ErrnoException
    // grpc-js says why a bind failed in its message (no syscall or code of its own).
    if (e?.message?.includes('No address added out of total')) {
      const code = /\b(EADDRINUSE|EACCES|EADDRNOTAVAIL)\b/.exec(e.message)?.[1]
      const why = code === undefined ? e.message : `${GRPC_WHY[code]} (${code})`
      if ((e as { healthPort?: boolean }).healthPort) throw new CliError(`cannot listen on ${settings.grpcHost}:${settings.healthPort} (gRPC health, plaintext): ${why}; pick another with --grpc-health-port or --grpc-host`, 1)
      throw new CliError(`cannot listen on ${settings.grpcHost}:${settings.grpcPort} (gRPC): ${why}; pick another with --grpc-port or --grpc-host`, 1)
    }
    throw listenError(err, config) ?? err
  }
  const ep = epp.endpoint(undefined)!
  process.stderr.write(
    `prefix-router: endpoint picker for ${[...epp.runtime.endpoints()].reduce((n, e) => n + e.instances.size, 0)} instance(s) with ${ep.routing.strategy}, ${settings.bodyMode} bodies, on grpc://${epp.grpcAddress} (${transport(epp, settings)}; admin ${epp.adminUrl})\n` +
      healthReport(epp.runtime, config) +
      exactReport(epp.runtime),
  )
  process.on('SIGHUP', () => {
    try {
      epp.runtime.reload()
    } catch {
      // reload() logged why; the running configuration stays.
    }
    const f = settings.tlsFiles
    if (f === undefined) return
    try {
      epp.reloadTls(readPair(f.cert, f.key))
      epp.log.info({ sha256: epp.tlsFingerprint }, 'gRPC TLS: the certificate files were read again; new connections get them')
    } catch (err) {
      epp.log.warn({ err: (err as Error).message, sha256: epp.tlsFingerprint }, 'gRPC TLS: the certificate files do not load; the running pair stays')
    }
  })
  const signal = await new Promise<NodeJS.Signals>((resolve) => {
    process.once('SIGINT', resolve)
    process.once('SIGTERM', resolve)
  })
  const now = (s: NodeJS.Signals) => {
    process.stderr.write(`prefix-router: ${s} again; exiting without waiting for streams open\n`)
    process.exit(s === 'SIGINT' ? 130 : 143)
  }
  process.once('SIGINT', now)
  process.once('SIGTERM', now)
  const { delayMs, timeoutMs } = epp.config.drain
  process.stderr.write(`prefix-router: ${signal}: draining (readiness answers NOT_SERVING; streams taken for ${delayMs} ms, then those open get up to ${timeoutMs} ms)\n`)
  await epp.shutdown({ delayMs, timeoutMs })
  process.stderr.write('prefix-router: stopped\n')
  return 0
}
