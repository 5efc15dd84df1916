// `prefix-router route`: the operator's dry run. Reads one request body on stdin and prints
// which instance it would go to and why, from the configuration alone: nothing is sent, no
// instance is probed (models are those declared in the config; all instances count as up).
import { ConfigError } from '../config.js'
import { Endpoint } from '../fleet/endpoint.js'
import { xxh3 } from '../hash.js'
import { ProxyError } from '../proxy/errors.js'
import { openAIRequest } from '../prefix/openai-key.js'
import { routingKey } from '../prefix/routing-key.js'
import { tenantOf } from '../prefix/tenant.js'
import { CliError, parseFlags } from './cli-error.js'
import { buildConfig, SERVE_FLAGS, type ServeFlags } from './serve-config.js'

const HELP = `usage: prefix-router route (--config FILE | --upstream URL ...) --api openai|invoke [options] < body

  --api openai|invoke     how to read the body: an OpenAI chat/completions JSON body, or raw invoke bytes
  --completions           with --api openai: the body is for /v1/completions (default: chat)
  --tenant ID             the X-Amzn-SageMaker-Prefix-Aware-Id header to assume
  --endpoint NAME         endpoint to route in (default: the first)
  --json                  print JSON instead of text
  plus the routing flags of 'serve' (--strategy, --prefix-length, --concurrency-threshold, ...)
`

async function readStdin(): Promise<Buffer> {
  const chunks: Buffer[] = []
  for await (const c of process.stdin) chunks.push(c as Buffer)
  return Buffer.concat(chunks)
}

export async function run(argv: string[]): Promise<number> {
  const { values } = parseFlags(argv, {
    ...SERVE_FLAGS,
    api: { type: 'string' },
    completions: { type: 'boolean' },
    tenant: { type: 'string' },
    endpoint: { type: 'string' },
    json: { type: 'boolean' },
    help: { type: 'boolean', short: 'h' },
  })
  if (values.help) {
    process.stdout.write(HELP)
    return 0
  }
  const { api, completions, tenant: tenantFlag, endpoint: epName, json, help: _h, ...flags } = values
  if (api !== 'openai' && api !== 'invoke') throw new CliError(`--api must be openai or invoke; got '${api ?? ''}'`)
  let config
  try {
    const built = buildConfig(flags as ServeFlags)
    if (!built.hasUpstreams) throw new CliError('no instances: give --config FILE or --upstream URL')
    config = built.config
  } catch (err) {
    if (err instanceof ConfigError) throw new CliError(err.message)
    throw err
  }
  const epc = epName === undefined ? config.endpoints[0]! : config.endpoints.find((e) => e.name === epName)
  if (epc === undefined) throw new CliError(`--endpoint '${epName}' is not in the configuration (${config.endpoints.map((e) => e.name).join(', ')})`)
  const ep = new Endpoint(config, epc)
  try {
    const body = await readStdin()
    const routing = ep.routing
    let key: Uint8Array | string
    let model: string | undefined
    let tenant: string | undefined
    let anchor: number | undefined
    let keyInfo: string
    if (api === 'invoke') {
      tenant = tenantOf(tenantFlag)
      key = body.subarray(0, routing.prefixLength)
      keyInfo = `first ${key.length} of ${body.length} body bytes`
    } else {
      const req = openAIRequest(completions ? 'completions' : 'chat', body, routing.prefixLength)
      tenant = tenantOf(tenantFlag, req.promptCacheKey)
      model = req.model
      anchor = req.anchor
      const cps = [...req.text].length
      key = req.text
      keyInfo = `first ${Math.min(cps, routing.prefixLength)} code points of the ${completions ? 'prompt' : 'messages'} text${cps > routing.prefixLength ? ` (of at least ${cps})` : ''}`
    }
    const { lease, instance } = ep.pick(key, tenant, model, anchor)
    lease.release()
    const result = {
      endpoint: ep.name,
      instance: instance.id,
      strategy: routing.strategy,
      decision: decisionOf(routing.strategy, routing.placement),
      key: keyInfo,
      keyHash: (typeof key === 'string'
        ? routingKey(key, tenant, routing.prefixLength, routing.strategy === 'longest_prefix' ? anchor : undefined)
        : xxh3(key, tenant === undefined ? 0n : xxh3(tenant))
      )
        .toString(16)
        .padStart(16, '0'),
      tenant: tenant ?? null,
      model: model ?? null,
      candidates: model === undefined ? ep.healthy().length : ep.healthy().filter((i) => !i.knowsModels() || i.serves(model)).length,
    }
    if (json) process.stdout.write(`${JSON.stringify(result, null, 2)}\n`)
    else {
      process.stdout.write(`${result.instance}\n`)
      process.stdout.write(
        `  endpoint ${result.endpoint}, strategy ${result.strategy}, decision ${result.decision}\n` +
          `  key: ${result.key}, xxh3 ${result.keyHash}${tenant !== undefined ? `, tenant '${tenant}'` : ''}\n` +
          `  model: ${result.model ?? '(none: any instance)'}, ${result.candidates} candidate instance(s); in-flight counts are not known to a dry run\n`,
      )
    }
    return 0
  } catch (err) {
    if (err instanceof ProxyError) throw new CliError(`${err.code}: ${err.message}`)
    throw err
  } finally {
    await ep.close()
  }
}

/** What a dry run's answer means: it knows no in-flight counts and no longest_prefix index. */
function decisionOf(strategy: string, placement: string): string {
  if (strategy === 'prefix_aware') return 'target'
  if (strategy === 'longest_prefix') {
    return placement === 'hash'
      ? 'target (where the hash places a prompt no instance holds; the running router also weighs its index of what it sent where and the prefill queued on each instance)'
      : 'target with all instances idle (balanced placement also weighs the prefill queued on each instance, which a dry run does not have)'
  }
  return `${strategy} (another run may pick differently)`
}
