// --prefill URL [BOOTSTRAP_PORT], --decode URL, their variables, the DNS names per role and
// the --pd-* settings: parsed as serve, epp and route parse them (the positional port joined
// before node:util parseArgs), good values into the configuration, bad ones refused by name.
import { spawnSync } from 'node:child_process'
import { fileURLToPath } from 'node:url'
import { describe, expect, it } from 'vitest'
import { parseArgsOptions, FLAGS } from '../../src/commands/flags.js'
import { joinBootstrapPorts } from '../../src/commands/role-flags.js'
import { buildConfig, type ServeFlags } from '../../src/commands/serve-config.js'
import { parseFlags } from '../../src/command-line/parse-flags.js'

const cli = fileURLToPath(new URL('../../dist/cli.js', import.meta.url))

/** The configuration serve builds from these arguments and variables. */
function built(argv: string[], env: NodeJS.ProcessEnv = {}) {
  const { values } = parseFlags(joinBootstrapPorts(argv), parseArgsOptions(FLAGS))
  return buildConfig(values as ServeFlags, env)
}
const instances = (argv: string[], env: NodeJS.ProcessEnv = {}) =>
  built(argv, env).config.endpoints[0]!.instances.map((i) => `${i.url} ${i.role}${i.bootstrapPort === undefined ? '' : ` ${i.bootstrapPort}`}`)
const refusal = (argv: string[], env: NodeJS.ProcessEnv = {}) => {
  try {
    built(argv, env)
  } catch (err) {
    return (err as Error).message
  }
  throw new Error(`accepted: ${argv.join(' ')}`)
}

describe('joinBootstrapPorts', () => {
  it("joins the port (or SGLang's none) after a role flag's URL into its value, and nothing else", () => {
    expect(joinBootstrapPorts(['--prefill', 'http://p:8000', '8998', '--decode', 'http://d:8000', '--port', '8080'])).toEqual([
      '--prefill',
      'http://p:8000 8998',
      '--decode',
      'http://d:8000',
      '--port',
      '8080',
    ])
    expect(joinBootstrapPorts(['--prefill=http://p:8000', 'none', '--decode', 'http://d:8000', '9'])).toEqual(['--prefill', 'http://p:8000 none', '--decode', 'http://d:8000 9'])
    // A flag after the URL, the end of the arguments, a word that is no port, `--`: left as they are.
    for (const argv of [['--prefill', 'http://p:8000', '--decode', 'http://d:8000'], ['--prefill', 'http://p:8000'], ['--prefill'], ['--prefill', 'http://p:8000', 'abc'], ['--', '--prefill', 'http://p:8000', '1'], ['--upstream', 'http://u:8000', '1']]) {
      expect(joinBootstrapPorts(argv)).toEqual(argv)
    }
  })
})

describe('--prefill and --decode', () => {
  it("add instances with their roles beside --upstream's, which do both; a prefill instance's port is its bootstrap port", () => {
    expect(instances(['--upstream', 'http://u:8000', '--prefill', 'http://p1:8000', '8998', '--prefill', 'http://p2:8000', '--decode', 'http://d1:8000', '--decode', 'http://d2:8000'])).toEqual([
      'http://u:8000 both',
      'http://p1:8000 prefill 8998',
      'http://p2:8000 prefill',
      'http://d1:8000 decode',
      'http://d2:8000 decode',
    ])
    expect(instances(['--prefill', 'http://p:8000', 'none', '--decode', 'http://d:8000'])).toEqual(['http://p:8000 prefill', 'http://d:8000 decode'])
    expect(built(['--decode', 'http://d:8000']).upstreamsFrom).toBe('--decode')
  })

  it('their variables hold comma-separated entries, each URL or URL PORT; flags win over them', () => {
    const env = { PREFIX_ROUTER_PREFILL: 'http://p1:8000 8998, http://p2:8000,', PREFIX_ROUTER_DECODE: 'http://d1:8000,http://d2:8000' }
    expect(instances([], env)).toEqual(['http://p1:8000 prefill 8998', 'http://p2:8000 prefill', 'http://d1:8000 decode', 'http://d2:8000 decode'])
    expect(instances(['--decode', 'http://d9:8000'], env)).toEqual(['http://p1:8000 prefill 8998', 'http://p2:8000 prefill', 'http://d9:8000 decode'])
  })

  it.each([
    [['--prefill', 'p:8000'], "--prefill must start with http:// or https://; got 'p:8000' (did you mean --prefill http://p:8000?)"],
    [['--decode', 'ftp://d:8000'], "--decode must be an http:// or https:// URL, not ftp://; got 'ftp://d:8000'"],
    [['--prefill', 'http://p:8000', '70000'], "--prefill http://p:8000: the bootstrap port (SGLang's --disaggregation-bootstrap-port) must be 1-65535 or none; got '70000'"],
    [['--prefill', 'http://p:8000', '0'], "--prefill http://p:8000: the bootstrap port (SGLang's --disaggregation-bootstrap-port) must be 1-65535 or none; got '0'"],
    [['--decode', 'http://d:8000', '8998'], "--decode takes a URL only: a bootstrap port belongs to a prefill instance; got 'http://d:8000 8998'"],
    [['--prefill', 'http://a:8000', '--decode', 'http://a:8000/'], 'http://a:8000 is given with --prefill and --decode: an instance has one role (one that does both prefill and decode: give it with --upstream only)'],
    [['--upstream', 'http://a:8000', '--decode', 'http://a:8000'], 'http://a:8000 is given with --upstream and --decode: an instance has one role'],
  ])('%j is refused, naming the value', (argv, message) => {
    expect(refusal(argv)).toContain(message)
  })

  it('bad entries in the variables are refused naming the variable', () => {
    expect(refusal([], { PREFIX_ROUTER_PREFILL: 'http://p:8000 8998 9' })).toBe("PREFIX_ROUTER_PREFILL takes a URL and an optional bootstrap port (URL PORT); got 'http://p:8000 8998 9'")
    expect(refusal([], { PREFIX_ROUTER_PREFILL: 'http://p:8000 port' })).toContain("PREFIX_ROUTER_PREFILL http://p:8000: the bootstrap port (SGLang's --disaggregation-bootstrap-port) must be 1-65535 or none; got 'port'")
    expect(refusal([], { PREFIX_ROUTER_DECODE: 'd:8000' })).toContain("PREFIX_ROUTER_DECODE must start with http:// or https://; got 'd:8000' (did you mean http://d:8000?)")
    expect(refusal([], { PREFIX_ROUTER_PREFILL: 'http://a:8000', PREFIX_ROUTER_DECODE: 'http://a:8000' })).toContain('http://a:8000 is given with PREFIX_ROUTER_PREFILL and PREFIX_ROUTER_DECODE')
  })
})

describe('--prefill-dns and --decode-dns', () => {
  it('are DNS sources with their role, asking --dns-server, beside --upstream-dns', () => {
    const c = built(['--upstream-dns', 'http://all:8000', '--prefill-dns', 'http://prefill:8000', '--decode-dns', 'http://decode:8000', '--decode-dns', 'http://decode-b:8000', '--dns-server', '127.0.0.1:53']).config
    expect(c.endpoints[0]!.discovery!.map((s) => [s.type === 'dns' && s.url, s.role, s.type === 'dns' && s.server])).toEqual([
      ['http://all:8000', undefined, '127.0.0.1:53'],
      ['http://prefill:8000', 'prefill', '127.0.0.1:53'],
      ['http://decode:8000', 'decode', '127.0.0.1:53'],
      ['http://decode-b:8000', 'decode', '127.0.0.1:53'],
    ])
    expect(built([], { PREFIX_ROUTER_PREFILL_DNS: 'http://prefill:8000' }).config.endpoints[0]!.discovery).toEqual([{ type: 'dns', url: 'http://prefill:8000', role: 'prefill', intervalMs: 5000, srv: false }])
    expect(refusal(['--prefill-dns', 'prefill:8000'])).toContain("--prefill-dns must be http://NAME:PORT (or https://), the name to resolve; got 'prefill:8000'")
  })
})

describe('the --pd-* settings', () => {
  it('set the disaggregation block, flags over variables over the file', () => {
    const c = built(['--decode', 'http://d:8000', '--pd-connector', 'sglang', '--pd-order', 'prefill-first', '--pd-threshold', '0', '--pd-kv-hold-ms', '5000'], { PREFIX_ROUTER_PD_WHEN_NO_PREFILL: 'fail', PREFIX_ROUTER_PD_THRESHOLD: '64', PREFIX_ROUTER_PD_DECODE_PREFILL_CAP: '0' }).config
    expect(c.disaggregation).toEqual({ connector: 'sglang', order: 'prefill-first', threshold: 0, decodePrefillCap: 0, whenNoPrefill: 'fail', kvHoldMs: 5000, prefillTimeoutMs: 60000 })
    expect(built(['--decode', 'http://d:8000']).config.disaggregation).toEqual({ connector: 'nixl', order: 'decode-first', threshold: 256, decodePrefillCap: 2048, whenNoPrefill: 'decode', kvHoldMs: 20000, prefillTimeoutMs: 60000 })
  })

  it.each([
    [['--pd-connector', 'lmcache'], /disaggregation\.connector: .*"nixl"\|"sglang"; got "lmcache" \(from --pd-connector\)/],
    [['--pd-order', 'decode'], /disaggregation\.order: .*got "decode" \(from --pd-order\)/],
    [['--pd-threshold', 'many'], /--pd-threshold must be a whole number; got 'many'/],
    [['--pd-threshold', '2000000'], /disaggregation\.threshold: .*1048576.*\(from --pd-threshold\)/],
    [['--pd-decode-prefill-cap', '2000000'], /disaggregation\.decodePrefillCap: .*1048576.*\(from --pd-decode-prefill-cap\)/],
    [['--pd-when-no-prefill', 'queue'], /disaggregation\.whenNoPrefill: .*"decode"\|"fail"; got "queue" \(from --pd-when-no-prefill\)/],
    [['--pd-kv-hold-ms', '4000000'], /disaggregation\.kvHoldMs: .*3600000.*\(from --pd-kv-hold-ms\)/],
  ])('%j is refused, naming the flag', (argv, message) => {
    expect(refusal(['--decode', 'http://d:8000', ...argv])).toMatch(message)
  })
})

describe('the commands that route take them', () => {
  const run = (args: string[], input?: string) => spawnSync(process.execPath, [cli, ...args], { encoding: 'utf8', input, env: Object.fromEntries(Object.entries(process.env).filter(([k]) => !k.startsWith('PREFIX_ROUTER_'))), timeout: 60_000 })

  it('serve, epp and route accept --prefill URL PORT and --decode, and refuse a bad port by name', () => {
    const args = ['--prefill', 'http://127.0.0.1:18000', '8998', '--decode', 'http://127.0.0.1:18100', '--pd-connector', 'sglang']
    for (const cmd of ['serve', 'epp', 'route']) {
      const ok = run([cmd, ...args, '--help'])
      expect(ok.status, `${cmd}: ${ok.stderr}`).toBe(0)
      expect(ok.stdout, cmd).toMatch(/--prefill URL \[PORT\][^]*\[PREFIX_ROUTER_PREFILL\]/)
      const bad = run([cmd, '--prefill', 'http://127.0.0.1:18000', '99999'], '{}')
      expect(bad.status, cmd).toBe(2)
      expect(bad.stderr, cmd).toContain("--prefill http://127.0.0.1:18000: the bootstrap port (SGLang's --disaggregation-bootstrap-port) must be 1-65535 or none; got '99999'")
    }
    // route's dry run picks among them (no request path of its own for the legs).
    const r = run(['route', ...args, '--json'], JSON.stringify({ messages: [{ role: 'user', content: 'hello' }] }))
    expect(r.status, r.stderr).toBe(0)
    expect(['http://127.0.0.1:18000', 'http://127.0.0.1:18100']).toContain((JSON.parse(r.stdout) as { instance: string }).instance)
  }, 120_000)
})
