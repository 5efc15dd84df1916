// `prefix-router epp-check HOST:PORT`: a gateway in one command. It sends a running endpoint
// picker one chat as Envoy's ext_proc filter would, forwards it to the pod the picker names,
// and passes the answer back through the stream: what a gateway's set-up needs to work, tried
// without the gateway. When the picker does not answer it says why, TLS against plaintext
// and the reverse included.
import { CliError } from '../command-line/cli-error.js'
import { parseFlags } from '../command-line/parse-flags.js'
import { requireFeatures } from '../core/optional-packages.js'

const HELP = `usage: prefix-router epp-check HOST:PORT [options]

Sends one chat completion through the endpoint picker at HOST:PORT (prefix-router epp, or any
Gateway API inference extension picker) as a gateway's ext_proc filter does, sends it on to
the pod the picker names, and passes the pod's answer back through the picker. Prints the
destination and the answer; exits 0 when the picker named a pod (header and metadata alike)
and the answer came back through it, 1 otherwise, saying why (nothing listening, TLS against
plaintext, the health port instead of ext_proc, no destination).

  --tls on|off             TLS to the picker, its certificate not verified, as gateways
                           configure it (default on, as epp's --grpc-tls)
  --body-mode M            streamed (FULL_DUPLEX_STREAMED, default) or buffered: as the
                           picker's --body-mode
  --model M                the request's model (default meta-llama/Llama-3.1-70B-Instruct)
  --content TEXT           the user message
  --timeout-ms N           the whole exchange, the pod's answer included (default 10000)
  --help, -h               this text
`

export async function run(argv: string[]): Promise<number> {
  const str = { type: 'string' } as const
  const { values, positionals } = parseFlags(
    argv,
    { tls: str, 'body-mode': str, model: str, content: str, 'timeout-ms': str, help: { type: 'boolean', short: 'h' } },
    true,
  )
  if (values.help) {
    process.stdout.write(HELP)
    return 0
  }
  const [address, ...extra] = positionals
  if (address === undefined || extra.length > 0) throw new CliError(`give one picker address, HOST:PORT; got ${positionals.length === 0 ? 'none' : positionals.map((p) => `'${p}'`).join(' ')} (see --help)`)
  const m = /^(\[[0-9a-fA-F:.]+\]|[^:[\]\s]+):(\d{1,5})$/.exec(address)
  if (m === null || Number(m[2]) < 1 || Number(m[2]) > 65535) throw new CliError(`the picker's address must be HOST:PORT (a port 1-65535); got '${address}'`)
  const tls = values.tls ?? 'on'
  if (tls !== 'on' && tls !== 'off') throw new CliError(`--tls must be on or off; got '${tls}'`)
  const mode = values['body-mode'] ?? 'streamed'
  if (mode !== 'streamed' && mode !== 'buffered') throw new CliError(`--body-mode must be streamed or buffered; got '${mode}'`)
  const rawTimeout = values['timeout-ms'] ?? '10000'
  const timeoutMs = Number(rawTimeout)
  if (!/^\d+$/.test(rawTimeout) || timeoutMs < 1 || timeoutMs > 600_000) throw new CliError(`--timeout-ms must be an integer from 1 to 600000; got '${rawTimeout}'`)
  requireFeatures(['epp'])
  const { check, CheckFailed } = await import('../epp/check.js')
  const body = Buffer.from(
    JSON.stringify({ model: values.model ?? 'meta-llama/Llama-3.1-70B-Instruct', messages: [{ role: 'user', content: values.content ?? 'Say hello through the endpoint picker.' }], max_tokens: 8 }),
  )
  let r
  try {
    r = await check({ address, tls: tls === 'on', mode, path: '/v1/chat/completions', body, timeoutMs })
  } catch (err) {
    if (err instanceof CheckFailed) throw new CliError(err.message, 1)
    throw err
  }
  const via = `the picker at ${address} (${tls === 'on' ? 'TLS' : 'plaintext'}, ${mode} bodies)`
  if (r.immediate !== undefined) {
    process.stdout.write(`${via} answered the request itself: ${r.immediate.status} ${r.immediate.body}\n`)
    return 1
  }
  const agree = r.header !== undefined && r.header === r.metadata
  process.stdout.write(
    `${via} chose ${r.header ?? r.metadata} (${agree ? 'header and metadata agree' : `header ${r.header ?? 'missing'}, metadata ${r.metadata ?? 'missing'}: they must agree`})\n` +
      `${(r.header ?? r.metadata)!.split(',')[0]} answered ${r.status} through the picker: ${r.response}\n`,
  )
  return agree ? 0 : 1
}
