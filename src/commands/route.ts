// `prefix-router route`: the operator's dry run. Reads one request body on stdin and prints
// which instance it would go to and why, from the configuration alone: nothing is sent, no
// instance is probed (models are those declared in the config; all instances count as up).
import { ConfigError } from '../config/config.js'
import { LocalEndpoint } from '../fleet/local-endpoint.js'
import { xxh3 } from '../core/hash.js'
import { RequestError } from '../core/errors.js'
import { routingKey, textSpan } from '../core/key/index.js'
import { keyHash } from '../core/key/key-hash.js'
import { decisionOf, strategyInfo, type StrategyInfo } from '../core/strategies.js'
import { CliError } from '../command-line/cli-error.js'
import { parseFlags } from '../command-line/parse-flags.js'
import { FLAGS, helpLines, parseArgsOptions } from './flags.js'
import { buildConfig, type ServeFlags } from './serve-config.js'
import { joinBootstrapPorts } from './role-flags.js'

// A dry run starts no fleet: the flags that size or start one are serve's alone.
const ROUTE_FLAGS = FLAGS.filter((f) => !f.serveOnly)

const HELP = `usage: prefix-router route (--config FILE | --upstream URL ...) [options] < body

  --api API               how to read the body: chat or completions (OpenAI JSON; openai: either, from the
                          body), or invoke (raw bytes). Default: from the body, a JSON object with
                          'messages' is chat, with 'prompt' completions, anything else invoke bytes
  --completions           the same as --api completions
  --tenant ID             the X-Amzn-SageMaker-Prefix-Aware-Id header to assume
  --endpoint NAME         endpoint to route in (default: the first)
  --json                  print JSON: { instance, reason, key, ... }, machine values, prose in 'note'

The routing and fleet flags of 'serve', each with its environment twin in brackets:
${helpLines(ROUTE_FLAGS)}
`

type Api = 'chat' | 'completions' | 'invoke'

async function readStdin(): Promise<Buffer> {
  const chunks: Buffer[] = []
  for await (const c of process.stdin) chunks.push(c as Buffer)
  return Buffer.concat(chunks)
}

/** The API a body is for, as the proxy's routes would receive it: chat, completions or invoke bytes. */
function apiOfBody(body: Buffer): Api {
  let v: unknown
  try {
    v = JSON.parse(body.toString('utf8'))
  } catch {
    return 'invoke'
  }
  if (v === null || typeof v !== 'object' || Array.isArray(v)) return 'invoke'
  if ('messages' in v) return 'chat'
  if ('prompt' in v) return 'completions'
  return 'invoke'
}

function apiOf(flag: string | undefined, completions: boolean, body: Buffer): { api: Api; from: 'flag' | 'body' } {
  if (completions) return { api: 'completions', from: 'flag' }
  if (flag === undefined) return { api: apiOfBody(body), from: 'body' }
  if (flag === 'chat' || flag === 'completions' || flag === 'invoke') return { api: flag, from: 'flag' }
  // `openai`: either OpenAI route; the body says which, and chat when it says neither.
  if (flag === 'openai') return { api: apiOfBody(body) === 'completions' ? 'completions' : 'chat', from: 'flag' }
  throw new CliError(`--api must be chat, completions, openai or invoke; got '${flag}'`)
}

export async function run(argv: string[]): Promise<number> {
  const { values } = parseFlags(joinBootstrapPorts(argv), {
    ...parseArgsOptions(ROUTE_FLAGS),
    api: { type: 'string' },
    completions: { type: 'boolean' },
    tenant: { type: 'string' },
    endpoint: { type: 'string' },
    json: { type: 'boolean' },
    help: { type: 'boolean', short: 'h' },
  })
  const { api: apiFlag, completions, tenant: tenantFlag, endpoint: epName, json, help, ...flags } = values as ServeFlags & {
    api?: string
    completions?: boolean
    tenant?: string
    endpoint?: string
    json?: boolean
    help?: boolean
  }
  if (help) {
    process.stdout.write(HELP)
    return 0
  }
  let config
  try {
    const built = buildConfig(flags)
    if (!built.hasUpstreams) throw new CliError('no instances: give --config FILE or --upstream URL')
    config = built.config
  } catch (err) {
    if (err instanceof ConfigError) throw new CliError(err.message)
    throw err
  }
  const epc = epName === undefined ? config.endpoints[0]! : config.endpoints.find((e) => e.name === epName)
  if (epc === undefined) throw new CliError(`--endpoint '${epName}' is not in the configuration (${config.endpoints.map((e) => e.name).join(', ')})`)
  const ep = new LocalEndpoint(config, epc)
  try {
    const body = await readStdin()
    const { api, from: apiFrom } = apiOf(apiFlag, completions === true, body)
    const routing = ep.routing
    // The key serve would compute for this body, from the same extraction.
    const k = routingKey(body, { api, prefixLength: routing.prefixLength, strategy: routing.strategy, matchLength: routing.matchLength, tenant: tenantFlag })
    const { model, tenant, anchor } = k
    const key = k.text ?? k.bytes
    let keyInfo: { unit: 'bytes' | 'code_points'; length: number; total: number; totalIsLowerBound: boolean }
    if (k.text === undefined) keyInfo = { unit: 'bytes', length: k.bytes.length, total: body.length, totalIsLowerBound: false }
    else {
      const cps = [...k.text].length
      // The extraction stops at twice the span in UTF-16 units: a text cut there is known only to be longer.
      const cut = k.text.length >= 2 * textSpan(routing.prefixLength, routing.strategy, routing.matchLength)
      keyInfo = { unit: 'code_points', length: Math.min(cps, routing.prefixLength), total: cps, totalIsLowerBound: cut }
    }
    const { lease, instance } = ep.pick(key, tenant, model, anchor)
    lease.release()
    const info = strategyInfo(routing.strategy)
    const hash = (
      typeof key === 'string'
        ? // A strategy matching blocks ends a chat's key at its anchor (native/strategy/request_key.cc).
          keyHash(key, tenant, routing.prefixLength, info.blocks ? anchor : undefined)
        : xxh3(key, tenant === undefined ? 0n : xxh3(tenant))
    )
      .toString(16)
      .padStart(16, '0')
    const result = {
      instance: instance.id,
      // What the running router's x-prefix-router-decision header would say.
      reason: decisionOf(routing.strategy, lease.overflow),
      key: { xxh3: hash, ...keyInfo },
      endpoint: ep.name,
      strategy: routing.strategy,
      ...(info.placement && { placement: routing.placement }),
      api,
      apiFrom,
      tenant: tenant ?? null,
      model: model ?? null,
      candidates: model === undefined ? ep.healthy().length : ep.healthy().filter((i) => !i.knowsModels() || i.serves(model)).length,
      note: noteOf(info, routing.placement),
    }
    if (json) process.stdout.write(`${JSON.stringify(result, null, 2)}\n`)
    else {
      const k = result.key
      const what = k.unit === 'bytes' ? `first ${k.length} of ${k.total} body bytes` : `first ${k.length} code points of the ${api === 'chat' ? 'messages' : 'prompt'} text${k.totalIsLowerBound ? ` (of at least ${k.total})` : ''}`
      process.stdout.write(
        `${result.instance}\n` +
          `  endpoint ${result.endpoint}, strategy ${result.strategy}, reason ${result.reason}, api ${api}${apiFrom === 'body' ? ' (from the body)' : ''}\n` +
          `  key: ${what}, xxh3 ${k.xxh3}${tenant !== undefined ? `, tenant '${tenant}'` : ''}\n` +
          `  model: ${result.model ?? '(none: any instance)'}, ${result.candidates} candidate instance(s)\n` +
          `  note: ${result.note}\n`,
      )
    }
    return 0
  } catch (err) {
    if (err instanceof RequestError) throw new CliError(`${err.code}: ${err.message}`)
    throw err
  } finally {
    await ep.close()
  }
}

/** What a dry run cannot know: no in-flight counts, and no index of what was sent where. */
function noteOf(info: StrategyInfo, placement: string): string {
  if (info.blocks) {
    return info.placement && placement === 'hash'
      ? 'where the hash places a prompt no instance holds; the running router also weighs its index of what it sent where and the prefill queued on each instance'
      : 'with every instance idle; balanced placement also weighs the prefill queued on each instance, and the running router its index of what it sent where, which a dry run does not have'
  }
  if (info.targeted) return 'with every instance idle; the running router overflows past the target once it holds concurrencyThreshold requests in flight'
  return 'another run may pick differently'
}
