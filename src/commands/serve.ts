// `prefix-router serve`: the router in front of a fleet. With no upstream configured it
// starts an embedded simulated fleet (what `npm start` runs) and says so.
import { ConfigError, type Config } from '../config.js'
import { ProxyServer } from '../proxy/proxy.js'
import { CliError, parseFlags } from './cli-error.js'
import { buildConfig, ENV, SERVE_FLAGS, type ServeFlags } from './serve-config.js'

const HELP = `usage: prefix-router serve [options]

Routes OpenAI-API and SageMaker-invoke requests to a fleet of vLLM (or OpenAI-compatible)
servers, sending requests that share a prefix to the same instance.

  --config FILE                 YAML or JSON configuration (see README: Configuration)
  --upstream URL                an instance, e.g. http://10.0.0.5:8000 (repeat for each)
  --strategy NAME               prefix_aware (default), longest_prefix, least_outstanding_requests, random
  --prefix-length N             routing prefix: bytes (invoke) or code points (OpenAI), 1024-65536 (default 4096)
  --concurrency-threshold N     in-flight requests at an instance before overflow, 1-1024 (default 10;
                                longest_prefix: none, it bounds load itself; a value given is a hard cap)
  --placement P                 longest_prefix: where a prompt no instance holds goes: balanced (default;
                                the least queued of a few; one router) or hash (router replicas agree)
  --load-factor F               longest_prefix: an instance is full above F x the fleet's mean in flight (default 3)
  --prefill-weight W            longest_prefix: a block to compute here, against one queued here (default 6)
  --match-length N              longest_prefix: code points of the prompt it matches, 1024-262144 (default 65536)
  --host H / --port N           front address (default 0.0.0.0:8080)
  --admin-host H / --admin-port N   admin address: /metrics, /admin/instances, /admin/reload (default 127.0.0.1:9090)
  --tls-cert FILE --tls-key FILE    serve TLS with ALPN h2 and http/1.1
  --upstream-protocol P         http1 (default), h2c (prior knowledge) or h2 (TLS upstreams)
  --max-body-bytes N            request body limit (default 16777216)
  --drain-delay-ms N            on SIGTERM: /health answers 503 and connections are still accepted for N ms (default 5000)
  --drain-timeout-ms N          then requests in flight get up to N ms to finish (default 30000); a second signal exits at once
  --debug-headers               add x-prefix-router-instance, -decision and -retries to responses
  --log-level L                 fatal, error, warn, info (default), debug, trace, silent
  --log-prompts                 log routing text (off by default: prompts are never logged otherwise)
  --sim-instances N             with no upstream: size of the embedded simulated fleet (default 4)

Environment: ${Object.keys(ENV).join(', ')}.
SIGHUP or POST /admin/reload re-reads the configuration for new requests.
`

export async function run(argv: string[]): Promise<number> {
  const { values } = parseFlags(argv, { ...SERVE_FLAGS, 'sim-instances': { type: 'string' }, help: { type: 'boolean', short: 'h' } })
  if (values.help) {
    process.stdout.write(HELP)
    return 0
  }
  const { 'sim-instances': simFlag, help: _help, ...flags } = values
  let built: { config: Config; hasUpstreams: boolean }
  try {
    built = buildConfig(flags as ServeFlags)
  } catch (err) {
    if (err instanceof ConfigError) throw new CliError(err.message)
    throw err
  }
  let { config } = built
  let closeSim = async (): Promise<void> => undefined
  if (!built.hasUpstreams) {
    const n = simFlag === undefined ? 4 : Number(simFlag)
    if (!Number.isInteger(n) || n < 1 || n > 64) throw new CliError(`--sim-instances must be an integer from 1 to 64; got '${simFlag}'`)
    const { startSimFleet } = await import('../sim/index.js')
    const fleet = await startSimFleet({ instances: n })
    closeSim = fleet.close
    config = { ...config, endpoints: [{ name: 'default', instances: fleet.urls.map((url) => ({ url, weight: 1, models: [] })), routing: {} }] }
    process.stderr.write(`prefix-router: no upstream configured; started an embedded simulated fleet of ${n} workers:\n  ${fleet.urls.join('\n  ')}\n`)
  }

  const reloadConfig = (): Config => {
    const next = buildConfig(flags as ServeFlags).config
    // The embedded fleet stays the fleet: a reload changes routing, not membership.
    return built.hasUpstreams ? next : { ...next, endpoints: config.endpoints }
  }
  const proxy = await ProxyServer.start(config, { reloadConfig })
  const ep = config.endpoints[0]!
  process.stderr.write(
    `prefix-router: routing ${config.endpoints.reduce((n, e) => n + e.instances.length, 0)} instance(s) with ${proxy.endpoint(ep.name)!.routing.strategy} on ${proxy.url} (admin ${proxy.adminUrl})\n` +
      `try:\n  curl -s ${proxy.url}/v1/chat/completions -H 'content-type: application/json' \\\n` +
      `    -d '{"model":"${proxy.endpoint(ep.name)!.models()[0]?.id ?? 'MODEL'}","messages":[{"role":"user","content":"Hello!"}],"max_tokens":16}'\n`,
  )

  process.on('SIGHUP', () => {
    try {
      proxy.reload()
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
  const { delayMs, timeoutMs } = proxy.config.drain
  process.stderr.write(
    `prefix-router: ${signal}: draining (health checks answer 503; new connections accepted for ${delayMs} ms, then requests in flight get up to ${timeoutMs} ms)\n`,
  )
  await proxy.shutdown()
  await closeSim()
  process.stderr.write('prefix-router: stopped\n')
  return 0
}
