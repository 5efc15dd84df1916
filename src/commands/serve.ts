// `prefix-router serve`: the router in front of a fleet. It needs instances to route to; with
// --demo (what `npm start` runs) it starts an embedded simulated fleet instead, and says so.
import { availableParallelism } from 'node:os'
import { ConfigError, MAX_WORKERS, type Config } from '../config/config.js'
import { TokenizerLoadError } from '../core/errors.js'
import { requireFeatures } from '../core/optional-packages.js'
import { featuresOf } from '../config/optional-features.js'
import { ProxyServer } from '../proxy/proxy.js'
import type { Runtime } from '../runtime/runtime.js'
import { exactReport, healthReport, listeningLine, shareReport, tryIt } from './banner.js'
import { CliError } from '../command-line/cli-error.js'
import { parseFlags } from '../command-line/parse-flags.js'
import { outliveClosedPipes } from '../command-line/closed-pipes.js'
import { ENV_PREFIX, FLAGS, helpLines, parseArgsOptions } from './flags.js'
import { baseUrlWarnings, duplicateWarnings, tokenizerWarnings } from './hints.js'
import { listenError } from '../command-line/listen-error.js'
import { buildConfig, buildForStart, type BuiltConfig } from './serve-config.js'
import { joinBootstrapPorts } from './role-flags.js'
import { version } from './version.js'

const HELP = `usage: prefix-router serve (--upstream URL ... | --config FILE | --demo) [options]

Routes OpenAI-API and SageMaker-invoke requests to a fleet of vLLM (or OpenAI-compatible)
servers, sending requests that share a prefix to the same instance.

The default strategy, longest_prefix, sends a prompt where the prefix cached for it saves the
most prefill against the prefill queued there: requests that share a long opening stay
together even when the rest of the first 4096 characters differs, which prefix_aware's hash
of them does not do. For Amazon SageMaker's PREFIX_AWARE exactly: --strategy prefix_aware.

${helpLines(FLAGS, [
  { usage: '--help, -h', help: 'this text' },
  { usage: '--version, -v', help: 'the version of prefix-router' },
])}

Every flag but --help and --version has the environment variable in brackets as its twin;
any other ${ENV_PREFIX}* variable is refused. Precedence: defaults < config file < environment < flags.
SIGHUP or POST /admin/reload re-reads the configuration for new requests.
`

const NO_UPSTREAM = `no upstream to route to. Give your vLLM instances with one of:
  --upstream http://HOST:8000                       (repeat for each instance)
  PREFIX_ROUTER_UPSTREAMS=http://HOST1:8000,http://HOST2:8000
  --config FILE                                     with endpoints: [{ name: default, instances: [http://HOST:8000] }]
or pass --demo to try the router on an embedded fleet of simulated vLLM workers (npm start does).`

/** Refuses what cannot work before anything is started. */
function check(built: BuiltConfig): void {
  const { demoFrom, upstreamsFrom, hasUpstreams, simInstances, config } = built
  if (demoFrom !== undefined && hasUpstreams) {
    throw new CliError(`${demoFrom} and ${upstreamsFrom} both given: ${demoFrom} routes to an embedded simulated fleet instead of your instances; drop one of them`)
  }
  if (demoFrom === undefined && !hasUpstreams) throw new CliError(NO_UPSTREAM)
  if (demoFrom === undefined && simInstances.from !== undefined) throw new CliError(`${simInstances.from} sizes the --demo fleet; without --demo it has nothing to size`)
  if (config.listen.port !== 0 && config.listen.port === config.admin.port) {
    throw new CliError(`the front port and the admin port are both ${config.listen.port}; give --admin-port another`)
  }
}

export async function run(argv: string[]): Promise<number> {
  const { values } = parseFlags(joinBootstrapPorts(argv), { ...parseArgsOptions(FLAGS), help: { type: 'boolean', short: 'h' }, version: { type: 'boolean', short: 'v' } })
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
  const built = buildForStart(flags)
  check(built)
  let { config } = built
  // Every optional package the configuration needs, at once, before the demo fleet or a port.
  requireFeatures(featuresOf(config))
  // Instances from --upstream or its variable are named by them; from the file, by key.
  const from = built.upstreamsFrom?.startsWith('--') || built.upstreamsFrom?.startsWith(ENV_PREFIX) ? built.upstreamsFrom : undefined
  for (const w of [...baseUrlWarnings(config), ...duplicateWarnings(config, from), ...tokenizerWarnings(config)]) process.stderr.write(`prefix-router: warning: ${w}\n`)

  let closeSim = async (): Promise<void> => undefined
  if (built.demoFrom !== undefined) {
    const n = built.simInstances.n
    const { startSimFleet } = await import('../sim/index.js')
    const fleet = await startSimFleet({ instances: n })
    closeSim = fleet.close
    config = { ...config, endpoints: [{ name: 'default', instances: fleet.urls.map((url) => ({ url, weight: 1, models: [], role: 'both' as const })), routing: {} }] }
    process.stderr.write(`prefix-router: ${built.demoFrom}: started an embedded fleet of ${n} SIMULATED vLLM workers:\n  ${fleet.urls.join('\n  ')}\n`)
  }

  const reloadConfig = (): Config => {
    let next: Config
    try {
      next = buildConfig(flags).config
    } catch (err) {
      // To POST /admin/reload a bad value is the configuration's fault (400), not the router's.
      throw err instanceof CliError ? new ConfigError(err.message) : err
    }
    // The embedded fleet stays the fleet: a reload changes routing, not membership.
    return built.demoFrom === undefined ? next : { ...next, endpoints: config.endpoints }
  }
  const workers = config.workers === 'auto' ? Math.min(availableParallelism(), MAX_WORKERS) : config.workers
  // Written the moment the router listens, before it serves: nothing answered comes before it.
  const banner = (runtime: Runtime, url: string) =>
    process.stderr.write(
      listeningLine(runtime, url, workers) +
        shareReport(runtime.shareLoad) +
        healthReport(runtime, config) +
        exactReport(runtime) +
        tryIt({ url, endpoint: (name) => runtime.endpoint(name) }) +
        (built.demoFrom === undefined
          ? ''
          : 'prefix-router: DEMO: answers are SIMULATED (a prefix cache and a latency model, no language model). Give --upstream URL to route to your vLLM servers.\n'),
    )
  let server: Server
  try {
    server = workers > 1 ? await clustered(config, workers, reloadConfig, banner) : await single(config, reloadConfig, banner)
  } catch (err) {
    await closeSim()
    // A tokenizer that does not load is the operator's file: one line naming it, not a stack.
    if (err instanceof TokenizerLoadError) throw new CliError(`the tokenizer (--tokenizer local, --tokenizer-path) does not load: ${err.message}`)
    // A probe token that cannot be read (probeAuth) is found as the endpoints are made.
    if (err instanceof ConfigError) throw new CliError(err.message)
    throw listenError(err, config) ?? err
  }
  const { runtime } = server

  process.on('SIGHUP', () => {
    try {
      server.reload()
    } catch {
      // reload() logged why; the running configuration stays.
    }
  })
  const signal = await new Promise<NodeJS.Signals>((resolve) => {
    process.once('SIGINT', resolve)
    process.once('SIGTERM', resolve)
  })
  // A second signal means now: the operator (or the orchestrator's kill) will not wait.
  const now = (s: NodeJS.Signals) => {
    process.stderr.write(`prefix-router: ${s} again; exiting without waiting for requests in flight\n`)
    process.exit(s === 'SIGINT' ? 130 : 143)
  }
  process.once('SIGINT', now)
  process.once('SIGTERM', now)
  const { delayMs, timeoutMs } = runtime.config.drain
  process.stderr.write(
    `prefix-router: ${signal}: draining (health checks answer 503; new connections accepted for ${delayMs} ms, then requests in flight get up to ${timeoutMs} ms)\n`,
  )
  await server.shutdown()
  await closeSim()
  process.stderr.write('prefix-router: stopped\n')
  return 0
}

/** What `run` needs of the router, whether one process or a cluster primary and its workers. */
interface Server {
  /** In a cluster, the primary's: admin port, probes, the configuration. */
  readonly runtime: Runtime
  readonly url: string
  reload(): unknown
  shutdown(): Promise<void>
}

type Banner = (runtime: Runtime, url: string) => void

async function single(config: Config, reloadConfig: () => Config, banner: Banner): Promise<Server> {
  const proxy = await ProxyServer.start(config, { reloadConfig, onListening: (p) => banner(p.runtime, p.url) })
  return { runtime: proxy.runtime, url: proxy.url, reload: () => proxy.reload(), shutdown: () => proxy.shutdown() }
}

async function clustered(config: Config, workers: number, reloadConfig: () => Config, banner: Banner): Promise<Server> {
  // Loaded only here: one process never pays for node:cluster and the IPC plumbing.
  const { ClusterPrimary } = await import('../cluster/primary.js')
  return ClusterPrimary.start(config, { workers, reloadConfig, onListening: (c) => banner(c.runtime, c.url) })
}
